"""Refined models as files (pure: no Spark, no I/O): each `<name>.sql` of the models folder is one SELECT over
the clean tables, in the form a dbt user writes, and becomes the refined table `<name>`:

    {{ config(materialized='incremental', unique_key=['ws_item_sk', 'ws_order_number']) }}
    SELECT ws.ws_item_sk, ws.ws_order_number, i.i_category AS category, ws.ws_net_paid AS net_paid
    FROM {{ source('web_sales') }} ws
    LEFT JOIN {{ source('item') }} i ON ws.ws_item_sk = i.i_item_sk

- `{{ source('table') }}`: the clean table of `<source schema>.<table>` (the refine job's `--source_schema`);
  `{{ source('schema', 'table') }}` names the schema; each named as the source names it
  (lakehouse.base.names). `{{ ref('model') }}`: another model's refined table (it is refreshed first).
- `{{ config(...) }}`: `unique_key` (a column or a list of columns of the SELECT, unique per row) and
  `materialized`: `incremental` (the default with a key: refreshed from the sources' changes, MERGEd by key)
  or `table` (rebuilt whenever a source changed); `incremental_strategy='merge'` is accepted (the only one).
- `{# … #}` is a comment; Jinja statements (`{% … %}`) and other expressions are refused, with the file and line.

Rendering keeps every line where it was, so an error Spark reports at a line of the rendered SQL is that line
of the file."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from lakehouse.base.names import check_source_name

NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)
STATEMENT = re.compile(r"\{%")
# What a model's SQL holds besides its code, leftmost first: a quoted identifier (a backtick doubled inside), a
# string literal in single or double quotes (a backslash escapes), a line comment, a block comment.
SQL_NOT_CODE = re.compile(
    r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|--[^\n]*|/\*.*?\*/", re.DOTALL
)
MATERIALIZATIONS = ("incremental", "table")
SPARK_LINE = re.compile(r"line (\d+)")


@dataclass(frozen=True)
class Reference:
    """What a model reads: a source table (`schema` None: the job's source schema) or another model."""

    kind: str  # "source" or "ref"
    name: str
    schema: str | None = None

    @property
    def input_name(self) -> str:
        """The name the refined table's commits record it under (`refine.consumed.<input_name>`)."""
        return f"{self.schema}.{self.name}" if self.schema else self.name


@dataclass(frozen=True)
class ModelError(Exception):
    """A model that cannot run: the file, the line (1-based) and why."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Model:
    name: str
    path: str
    text: str  # the file as written
    unique_key: tuple[str, ...] = ()
    materialized: str = "table"
    config_line: int = 1
    references: tuple[Reference, ...] = ()

    @property
    def incremental(self) -> bool:
        return self.materialized == "incremental" and bool(self.unique_key)

    @property
    def sources(self) -> tuple[Reference, ...]:
        return tuple(r for r in self.references if r.kind == "source")

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.references if r.kind == "ref")

    def render(self, resolve: Callable[[Reference], str]) -> str:
        """The SQL with each `source()`/`ref()` replaced by `resolve(reference)` and the config and comments
        blanked, line for line."""

        def expression(match: re.Match[str]) -> str:
            newlines = "\n" * match.group(0).count("\n")
            reference = _reference(match.group(1))
            return (resolve(reference) if reference is not None else "") + newlines

        return EXPRESSION.sub(expression, _blank_comments(self.text))

    def error(self, message: str, line: int | None = None) -> ModelError:
        return ModelError(self.path, line or self.config_line, message)


@dataclass
class ModelFolder:
    """The models of a folder in refresh order (a model after those it refs), and the files refused."""

    models: list[Model] = field(default_factory=list)
    errors: dict[str, ModelError] = field(default_factory=dict)  # model name → why it cannot run


def _blank_comments(text: str) -> str:
    return COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _call(expression: str) -> tuple[str, list[object], dict[str, object]]:
    """`name(literal, …, key=literal)` → (name, args, kwargs); ValueError otherwise."""
    try:
        node = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as error:
        raise ValueError(f"not an expression: {expression.strip()!r} ({error.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"only config(), source() and ref() are supported, not {expression.strip()!r}")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg or "": ast.literal_eval(k.value) for k in node.keywords}
    except ValueError:
        raise ValueError(f"{node.func.id}() takes literal values only: {expression.strip()!r}") from None
    return node.func.id, args, kwargs


def _reference(expression: str) -> Reference | None:
    name, args, kwargs = _call(expression)
    if name == "config":
        return None
    if kwargs or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{name}() takes names as strings: {expression.strip()!r}")
    names = [str(a) for a in args]
    if name == "ref" and len(names) == 1 and NAME.match(names[0]):
        return Reference("ref", names[0])
    if name == "source" and len(names) in (1, 2):
        # Named as the source names it (its clean table's name is folded from it: names.table_name); a name DMS
        # cannot write is refused here (InvalidNameError, a ValueError), with the model's line.
        roles = ("schema", "table") if len(names) == 2 else ("table",)
        for part, role in zip(names, roles, strict=True):
            check_source_name(part, f"source() {role}", folder=True)
        return Reference("source", names[-1].lower(), names[0] if len(names) == 2 else None)
    if name in ("ref", "source"):
        raise ValueError(
            f"{name}() names one model (ref) or [schema,] table (source): {expression.strip()!r}"
        )
    raise ValueError(f"only config(), source() and ref() are supported, not {name}()")


def _key(value: object) -> tuple[str, ...]:
    columns = [value] if isinstance(value, str) else value
    if not isinstance(columns, list | tuple) or not columns or not all(isinstance(c, str) for c in columns):
        raise ValueError(f"unique_key is a column name or a list of them, not {value!r}")
    names = tuple(c.strip() for part in columns for c in str(part).split(",") if c.strip())
    if len(set(names)) != len(names):
        raise ValueError(f"unique_key names a column twice: {value!r}")
    return names


def parse_model(path: str, text: str) -> Model:
    """One model file (its path names it: `<name>.sql`); ModelError with the line of the first problem."""
    stem = path.replace("\\", "/").rsplit("/", 1)[-1]
    name = stem[: -len(".sql")] if stem.endswith(".sql") else stem
    if not NAME.match(name):
        raise ModelError(
            path, 1, f"a model's file name is its table's: lower-case letters, digits, _ ({name!r})"
        )
    blanked = _blank_comments(text)
    statement = STATEMENT.search(blanked)
    if statement:
        raise ModelError(
            path, _line_of(blanked, statement.start()), "Jinja statements ({% … %}) are not supported"
        )
    settings: dict[str, object] = {}
    config_line = 1
    references: list[Reference] = []
    for match in EXPRESSION.finditer(blanked):
        line = _line_of(blanked, match.start())
        try:
            call, args, kwargs = _call(match.group(1))
            if call == "config":
                if settings or args:
                    raise ValueError("one config(key=value, …) per model")
                settings, config_line = dict(kwargs) or {"materialized": "table"}, line
                continue
            reference = _reference(match.group(1))
        except ValueError as error:
            raise ModelError(path, line, str(error)) from None
        if reference is not None and reference not in references:
            references.append(reference)
    model = Model(name, path, text, config_line=config_line, references=tuple(references))
    return _configured(model, settings)


def _configured(model: Model, settings: Mapping[str, object]) -> Model:
    unknown = set(settings) - {"unique_key", "materialized", "incremental_strategy"}
    if unknown:
        raise model.error(
            f"config() knows unique_key, materialized, incremental_strategy, not {sorted(unknown)}"
        )
    if settings.get("incremental_strategy", "merge") != "merge":
        raise model.error("incremental_strategy: only 'merge' (by unique_key) is supported")
    try:
        key = _key(settings["unique_key"]) if "unique_key" in settings else ()
    except ValueError as error:
        raise model.error(str(error)) from None
    materialized = settings.get("materialized", "incremental" if key else "table")
    if materialized not in MATERIALIZATIONS:
        raise model.error(f"materialized is one of {list(MATERIALIZATIONS)}, not {materialized!r}")
    body = _sql_code(model.render(lambda reference: "t")).strip()
    if not re.match(r"(?is)^\(*\s*(select|with)\b", body):
        raise model.error("a model is one SELECT (or WITH … SELECT) statement", _first_sql_line(model.text))
    if ";" in body.rstrip(";").rstrip():
        raise model.error("a model is one statement: no ';' inside", _first_sql_line(model.text))
    if not model.sources and not model.refs:
        raise model.error("a model reads at least one {{ source('table') }} or {{ ref('model') }}")
    return Model(
        model.name, model.path, model.text, key, str(materialized), model.config_line, model.references
    )


def _sql_code(sql: str) -> str:
    """The SQL's code alone, line for line: comments blanked, and every quoted identifier and string literal
    emptied to its quotes (a `;`, `--` or keyword inside one is a name's or a value's, not the statement's)."""

    def blank(match: re.Match[str]) -> str:
        text = match.group(0)
        newlines = "\n" * text.count("\n")
        return (newlines or " ") if text[0] in "-/" else text[0] + newlines + text[0]

    return SQL_NOT_CODE.sub(blank, sql)


def _first_sql_line(text: str) -> int:
    blanked = _sql_code(EXPRESSION.sub("", _blank_comments(text)))
    for number, line in enumerate(blanked.splitlines(), start=1):
        if line.strip():
            return number
    return 1


def load_folder(files: Iterable[tuple[str, str]]) -> ModelFolder:
    """(path, text) of each `.sql` file → the models in refresh order and the errors: a file with an error, a
    ref to a model that is missing or broken, or a cycle of refs, refuses that model alone."""
    folder = ModelFolder()
    parsed: dict[str, Model] = {}
    for path, text in sorted(files):
        try:
            model = parse_model(path, text)
        except ModelError as error:
            name = path.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".sql")
            folder.errors[name] = error
            continue
        parsed[model.name] = model
    visiting: set[str] = set()

    def visit(model: Model) -> bool:
        if model.name in folder.errors:
            return False
        if any(m.name == model.name for m in folder.models):
            return True
        if model.name in visiting:
            folder.errors[model.name] = model.error(f"refs form a cycle through {model.name}")
            return False
        visiting.add(model.name)
        for ref in model.refs:
            upstream = parsed.get(ref)
            if upstream is None or not visit(upstream):
                why = "is broken" if ref in folder.errors else "is not a model of the folder"
                folder.errors.setdefault(
                    model.name, model.error(f"ref('{ref}') {why}", _ref_line(model, ref))
                )
                visiting.discard(model.name)
                return False
        visiting.discard(model.name)
        folder.models.append(model)
        return True

    for model in parsed.values():
        visit(model)
    return folder


def _ref_line(model: Model, ref: str) -> int:
    blanked = _blank_comments(model.text)
    for match in EXPRESSION.finditer(blanked):
        if re.search(rf"ref\s*\(\s*['\"]{re.escape(ref)}['\"]", match.group(1)):
            return _line_of(blanked, match.start())
    return model.config_line


def reads_of(model: Model) -> Counter[str]:
    """How many times the model's SQL reads each input (a self-join reads one twice)."""
    reads: Counter[str] = Counter()
    model.render(lambda reference: reads.update([reference.input_name]) or "")
    return reads


def model_failure(model: Model, error: BaseException) -> ModelError:
    """The error as `<file>:<line>: <message>`: Spark's line of the rendered SQL is the file's line."""
    if isinstance(error, ModelError):
        return error
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    line = SPARK_LINE.search(str(error))
    return model.error(message, int(line.group(1)) if line else None)
