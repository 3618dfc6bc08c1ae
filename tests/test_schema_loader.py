"""The schema loader: Kafka's format accepted as is, and every rule break named."""

from __future__ import annotations

import json

import pytest

from records.schema import SchemaError, Versions, load_schema_dir, parse_schema_text, snake_case


def _schema(fields: list[dict], **top: object) -> str:
    doc = {"apiKey": 99, "type": "metadata", "name": "TestRecord", "validVersions": "0-2", "flexibleVersions": "1+", "fields": fields}
    doc.update(top)
    return "// a comment\n" + json.dumps(doc, indent=1)


def _field(**kw: object) -> dict:
    f = {"name": "Value", "type": "int32", "versions": "0+", "about": "x"}
    f.update(kw)
    return f


def test_comments_and_every_key_are_accepted() -> None:
    text = """
    // header comment
    {
      "apiKey": 99, "type": "request", "listeners": ["broker"], "name": "Thing", // trailing comment
      "validVersions": "0-3", "flexibleVersions": "2+", "latestVersionUnstable": false,
      "fields": [
        { "name": "Url", "type": "string", "versions": "0+", "about": "has // inside a string" },
        { "name": "Items", "type": "[]Item", "versions": "1+", "nullableVersions": "1+", "fields": [
          { "name": "Id", "type": "uuid", "versions": "1+", "mapKey": true, "entityType": "topicId", "about": "" }
        ]},
        { "name": "Extra", "type": "Common", "versions": "2+", "taggedVersions": "2+", "tag": "0" }
      ],
      "commonStructs": [
        { "name": "Common", "versions": "0+", "fields": [ { "name": "A", "type": "int64", "versions": "0+", "default": 16 } ] }
      ]
    }"""
    spec = parse_schema_text(text, "Thing.json")
    assert spec.name == "Thing" and spec.api_key == 99
    assert [f.name for f in spec.fields] == ["Url", "Items", "Extra"]
    assert spec.fields[0].about == "has // inside a string"
    assert spec.fields[2].tag == 0 and spec.fields[2].struct is spec.common_structs["Common"]
    assert spec.common_structs["Common"].fields[0].default == 16


def test_versions_parse() -> None:
    assert Versions.parse("0+", "v") == Versions(0, Versions.OPEN)
    assert Versions.parse("3-5", "v") == Versions(3, 5)
    assert Versions.parse("none", "v").empty
    with pytest.raises(ValueError):
        Versions.parse("5-3", "v")


def test_snake_case() -> None:
    assert snake_case("TopicId") == "topic_id"
    assert snake_case("Isr") == "isr"
    assert snake_case("CRCType") == "crc_type"
    assert snake_case("From") == "from_"


@pytest.mark.parametrize(
    ("fields", "top", "message"),
    [
        ([_field(name="1Bad")], {}, r"field 1Bad.*must be a letter"),
        ([_field(name="has_underscore")], {}, r"field has_underscore.*must be a letter"),
        ([_field(name="A"), _field(name="A")], {}, r"field A: duplicate field name"),
        ([_field(name="A", versions="1+", taggedVersions="1+", tag=0), _field(name="B", versions="1+", taggedVersions="1+", tag=2)], {}, r"tags must be contiguous starting at 0, found \[0, 2\]"),
        ([_field(name="A", versions="1+", taggedVersions="1+", tag=1)], {}, r"tags must be contiguous starting at 0, found \[1\]"),
        ([_field(name="A", versions="1+", taggedVersions="1+", tag=0), _field(name="B", versions="1+", taggedVersions="1+", tag=0)], {}, r"tag 0 is used by more than one field"),
        ([_field(taggedVersions="0+", tag=0)], {}, r"field Value: taggedVersions 0\+ is not within flexibleVersions 1\+"),
        ([_field(tag=0)], {}, r"field Value: a tag needs taggedVersions"),
        ([_field(nullableVersions="0+")], {}, r"field Value: nullableVersions is set, but type int32 cannot be null"),
        ([_field(type="[][]int32")], {}, r"field Value: nested arrays are not allowed"),
        ([_field(type="int8", default="200")], {}, r"field Value: default 200 is out of range for int8"),
        ([_field(type="bool", default="yes")], {}, r"field Value: invalid default 'yes' for bool"),
        ([_field(type="string", default="null")], {}, r"field Value: null cannot be the default"),
        ([_field(type="[]int32", default="x")], {}, r"field Value: invalid default 'x'"),
        ([_field(type="uuid", default="not-a-uuid")], {}, r"field Value: invalid default"),
        ([_field(type="Missing")], {}, r"field Value: struct type Missing has no fields"),
        ([_field(type="bogus")], {}, r"field Value: unknown type 'bogus'"),
        ([_field(versions="x")], {}, r"field Value: versions 'x' is not a version range"),
        ([_field(colour="red")], {}, r"field Value: unknown key\(s\): colour"),
        ([_field()], {"type": "nonsense"}, r"message type 'nonsense'"),
        ([_field()], {"flexibleVersions": "1-2"}, r"flexibleVersions 1-2 must be open-ended"),
    ],
)
def test_every_rule_break_names_the_file_and_field(fields: list[dict], top: dict, message: str) -> None:
    with pytest.raises(SchemaError, match=message) as e:
        parse_schema_text(_schema(fields, **top), "Broken.json")
    assert str(e.value).startswith("Broken.json: ")


def test_nested_field_paths_are_named() -> None:
    fields = [{"name": "Outer", "type": "[]Inner", "versions": "0+", "about": "", "fields": [_field(name="Deep", type="int8", default="-999")]}]
    with pytest.raises(SchemaError, match=r"Broken.json: field Outer.Deep: default -999 is out of range"):
        parse_schema_text(_schema(fields), "Broken.json")


def test_invalid_json_names_the_line(tmp_path) -> None:
    (tmp_path / "Bad.json").write_text('{\n "name": "X",\n oops }')
    (tmp_path / "Good.json").write_text(_schema([_field()]))
    specs, errors = load_schema_dir(tmp_path)
    assert [s.name for s in specs] == ["TestRecord"]
    assert len(errors) == 1 and "Bad.json: invalid JSON at line 3" in str(errors[0])
