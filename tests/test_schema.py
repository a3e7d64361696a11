"""The JSON contract: every fixture's output validates against the shipped schemas; every key is documented."""
import json
import re
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import default_report, fixture_trace, per_file_fixtures
from nsysanalyze import batch
from nsysanalyze.cli import cli

jsonschema = pytest.importorskip("jsonschema")
SCHEMAS = resources.files("nsysanalyze") / "schema"
DOCS = (Path(__file__).parent.parent / "docs" / "json.md").read_text()
FILES = per_file_fixtures()


def schema(name):
    return json.loads((SCHEMAS / name).read_text())


def output(*args):
    result = CliRunner().invoke(cli, [*map(str, args)])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_fixture_validates(path, monkeypatch):
    # the CLI renders the file's report as computed once for this run (conftest.default_report)
    monkeypatch.setattr(batch, "analyze_job", lambda p, step_range: default_report(p))
    report = output("diagnose", path, "--format", "json")
    jsonschema.validate(report, schema("report.schema.json"))
    jsonschema.validate(output("kernels", path, "--format", "json"), schema("kernels.schema.json"))
    assert report["format_version"] == 3
    osrt = any("No OS runtime data" in n for n in report["notes"])
    for row in report["summary"]["devices"] + report["steps"]:
        assert (row["munmap_count"] is None) == osrt  # not captured: null, never 0
        assert all(isinstance(v, int) for k, v in row.items() if k.endswith(("_bytes", "_count", "_calls")) and v is not None)


def test_several_files_and_ranks_validate():
    files = [fixture_trace(f"vit_l32_2gpu_ddp_{r}.sqlite") for r in (0, 1)]
    doc = output("diagnose", *files, "--format", "json")
    assert {"traces", "ranks"} <= doc.keys()
    jsonschema.validate(doc, schema("report.schema.json"))
    jsonschema.validate(output("kernels", *files, "--format", "json"), schema("kernels.schema.json"))


def test_a_float_byte_count_or_a_missing_key_is_rejected():
    report = output("diagnose", fixture_trace("resnet18_baseline.sqlite"), "--format", "json")
    bad = json.loads(json.dumps(report))
    bad["summary"]["devices"][0]["htod_bytes"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("report.schema.json"))
    bad = json.loads(json.dumps(report))
    del bad["steps"][0]["munmap_count"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("report.schema.json"))


def test_every_schema_key_is_documented():
    documented = set(re.findall(r"`([A-Za-z_]+)`", DOCS))
    defs = schema("report.schema.json")["$defs"] | schema("kernels.schema.json")["$defs"]
    keys = {k for d in defs.values() for k in d.get("properties", {})}
    keys |= set(defs["ranks"]["properties"]["ranks"]["items"]["required"])
    keys |= set(defs["ranks"]["properties"]["steps"]["items"]["required"])
    medians = {k for k in keys if k.startswith("step_median_")}
    assert medians and all(k[len("step_median_"):] in documented for k in medians)
    per_kind = {k for k in keys if (m := re.fullmatch(r"nccl_([a-z]+)_(count|ns|exposed_ns)", k))
                and m[1] in documented and f"nccl_K_{m[2]}" in documented}  # documented once as nccl_K_*
    assert len(per_kind) == 21
    assert sorted(keys - medians - per_kind - documented) == []
