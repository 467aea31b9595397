"""Dtype names, block sizes, scale_dim and dtype resolution of moe_ep, from Python.

A port of the resolution tests (ConfigResolve) and of the dtype parts of the knob parsing tests
(ConfigKnobs) of tests/test_config.cc to moe_ep.resolve_dtypes(weight_dtype, dispatch_dtype=,
combine_dtype=, env={...}): the same cases with the same expected dtypes, sources, origins and
warning texts, plus what is specific to Python: every warning of a resolution is also issued
through the warnings module (DeprecationWarning for the deprecated variables), errors are
ValueError (moe_ep.InvalidArgument) naming the variable, the value and the valid values, the
enums are enum.Enum with the contract's string values, and env=None reads the real process
environment once, which is checked in subprocesses.
"""

import enum
import os
import subprocess
import sys
import warnings

import pytest

import moe_ep

D, C, Wt = moe_ep.DispatchDtype, moe_ep.CombineDtype, moe_ep.WeightDtype
VALID_DISPATCH = "bf16|fp8|fp4|bfloat16|float8_blockwise|mxfp4_blockwise"
VALID_COMBINE = ("bf16|fp8|fp8_direct_cast|int8_e3m4|bfloat16|float8_blockwise|float8_direct_cast|"
                 "int8_e3m4_blockwise")
VALID_BOOL = "1|0|true|false|yes|no|on|off (case-insensitive)"
DEPRECATED_SOURCE = "deprecated env"  # C++ to_string(DtypeSource::kDeprecatedEnv)


def resolve(weights, dispatch="auto", combine="auto", env=None):
    """resolve_dtypes with `env` as the MOE_EP_* environment; checks the issued warnings."""
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter("always")
        r = moe_ep.resolve_dtypes(weights, dispatch_dtype=dispatch, combine_dtype=combine,
                                  env=dict(env or {}))
    assert [str(w.message) for w in issued] == list(r.warnings)
    for w in issued:
        if "deprecated" in str(w.message):
            assert issubclass(w.category, DeprecationWarning), (w.category, str(w.message))
    return r


def count(r, *parts):
    return sum(all(p in w for p in parts) for w in r.warnings)


def error_of(fn):
    with pytest.raises(moe_ep.InvalidArgument) as info:
        fn()
    assert isinstance(info.value, ValueError)
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Names, enums and sizes

def test_enums_have_the_contract_names_and_string_values():
    assert issubclass(D, enum.Enum) and issubclass(C, enum.Enum) and issubclass(Wt, enum.Enum)
    assert [(m.name, m.value) for m in D] == [
        ("bf16", "bfloat16"), ("fp8", "float8_blockwise"), ("fp4", "mxfp4_blockwise")]
    assert [(m.name, m.value) for m in C] == [
        ("bf16", "bfloat16"), ("fp8", "float8_blockwise"),
        ("fp8_direct_cast", "float8_direct_cast"), ("int8_e3m4", "int8_e3m4_blockwise")]
    assert [m.name for m in Wt] == ["bf16", "fp8", "fp4"]
    assert D("float8_blockwise") is D.fp8 and C["fp8_direct_cast"].value == "float8_direct_cast"


def test_block_sizes():
    assert moe_ep.FP8_BLOCK_SIZE == 128
    assert moe_ep.MXFP4_BLOCK_SIZE == 32


@pytest.mark.parametrize("dtype,expected", [
    (D.bf16, 0), (D.fp8, 56), (D.fp4, 224), (C.bf16, 0), (C.fp8, 56), (C.fp8_direct_cast, 0),
    ("bf16", 0), ("bfloat16", 0), ("fp8", 56), ("float8_blockwise", 56), ("fp4", 224),
    ("mxfp4_blockwise", 224), ("fp8_direct_cast", 0), ("float8_direct_cast", 0)])
def test_scale_dim(dtype, expected):
    assert moe_ep.scale_dim(dtype, 7168) == expected


def test_scale_dim_rejects_unknown_names():
    msg = error_of(lambda: moe_ep.scale_dim("fp16", 7168))
    assert "fp16" in msg


# ---------------------------------------------------------------------------------------------
# Resolution (ConfigResolve)

def test_every_source_name():
    assert resolve("bf16", "fp8").dispatch_source == "caller"
    assert resolve("bf16", env={"MOE_EP_DISPATCH_DTYPE": "fp8"}).dispatch_source == "env"
    assert resolve("bf16", env={"MOE_EP_FP8_DISP": "1"}).dispatch_source == DEPRECATED_SOURCE
    assert resolve("bf16").dispatch_source == "auto"


@pytest.mark.parametrize("env", [{}, {"MOE_EP_DISPATCH_DTYPE": "auto",
                                      "MOE_EP_COMBINE_DTYPE": "auto"}])
@pytest.mark.parametrize("weights,dispatch,combine,origin", [
    (Wt.bf16, D.bf16, C.bf16, "auto: weights bfloat16"),
    ("bf16", D.bf16, C.bf16, "auto: weights bfloat16"),
    (Wt.fp8, D.fp8, C.bf16, "auto: weights float8"),
    ("fp8", D.fp8, C.bf16, "auto: weights float8"),
    (Wt.fp4, D.fp4, C.fp8, "auto: weights mxfp4"),
    ("fp4", D.fp4, C.fp8, "auto: weights mxfp4")])
def test_auto_rule_follows_weight_dtype(env, weights, dispatch, combine, origin):
    r = resolve(weights, env=env)
    assert (r.dispatch, r.combine) == (dispatch, combine)
    assert (r.dispatch_source, r.combine_source) == ("auto", "auto")
    assert (r.dispatch_origin, r.combine_origin) == (origin, origin)
    assert r.warnings == []


def test_caller_wins_over_env_deprecated_and_auto():
    env = {"MOE_EP_DISPATCH_DTYPE": "fp4", "MOE_EP_COMBINE_DTYPE": "fp8_direct_cast",
           "MOE_EP_FP8_DISP": "1"}
    r = resolve(Wt.fp8, D.bf16, C.fp8, env)
    assert (r.dispatch, r.combine) == (D.bf16, C.fp8)
    assert (r.dispatch_source, r.combine_source) == ("caller", "caller")
    assert (r.dispatch_origin, r.combine_origin) == ("caller", "caller")
    assert count(r, "MOE_EP_DISPATCH_DTYPE=fp4", "ignored", "bfloat16") == 1
    assert count(r, "MOE_EP_COMBINE_DTYPE=fp8_direct_cast", "ignored") == 1
    assert count(r, "MOE_EP_FP8_DISP=1", "deprecated", "MOE_EP_DISPATCH_DTYPE") == 1
    assert len(r.warnings) == 3


def test_caller_equal_to_env_needs_no_warning():
    r = resolve("bf16", "fp8", "bf16",
                {"MOE_EP_DISPATCH_DTYPE": "fp8", "MOE_EP_COMBINE_DTYPE": "bfloat16"})
    assert (r.dispatch_source, r.combine_source) == ("caller", "caller")
    assert r.warnings == []


def test_caller_decides_each_leg_independently():
    r = resolve("fp8", "fp4", "auto", {"MOE_EP_COMBINE_DTYPE": "fp8_direct_cast"})
    assert (r.dispatch, r.dispatch_source) == (D.fp4, "caller")
    assert (r.combine, r.combine_source) == (C.fp8_direct_cast, "env")
    assert r.combine_origin == "MOE_EP_COMBINE_DTYPE=fp8_direct_cast"


def test_caller_values_as_string_values():
    r = resolve("bf16", "mxfp4_blockwise", "float8_direct_cast")
    assert (r.dispatch, r.combine) == (D.fp4, C.fp8_direct_cast)


def test_env_wins_over_auto_and_shows_the_value_as_written():
    r = resolve("bf16", env={"MOE_EP_DISPATCH_DTYPE": "float8_blockwise",
                             "MOE_EP_COMBINE_DTYPE": "fp8"})
    assert (r.dispatch, r.combine) == (D.fp8, C.fp8)
    assert (r.dispatch_source, r.combine_source) == ("env", "env")
    assert r.dispatch_origin == "MOE_EP_DISPATCH_DTYPE=float8_blockwise"
    assert r.combine_origin == "MOE_EP_COMBINE_DTYPE=fp8"
    assert r.warnings == []


def test_new_variable_wins_over_deprecated_with_a_warning():
    r = resolve("fp4", env={"MOE_EP_DISPATCH_DTYPE": "bf16", "MOE_EP_FP8_DISP": "1"})
    assert (r.dispatch, r.dispatch_source) == (D.bf16, "env")
    assert r.dispatch_origin == "MOE_EP_DISPATCH_DTYPE=bf16"
    assert (r.combine, r.combine_source) == (C.fp8, "auto")  # still follows the fp4 weights
    assert r.warnings == [
        "MOE_EP_FP8_DISP=1 is deprecated and ignored because MOE_EP_DISPATCH_DTYPE=bf16 is "
        "set; unset MOE_EP_FP8_DISP"]


def test_deprecated_fp8_honoured():
    with pytest.warns(DeprecationWarning, match="MOE_EP_FP8_DISP=1 is deprecated"):
        r = moe_ep.resolve_dtypes("bf16", env={"MOE_EP_FP8_DISP": "1"})
    assert (r.dispatch, r.dispatch_source) == (D.fp8, DEPRECATED_SOURCE)
    assert r.dispatch_origin == "MOE_EP_FP8_DISP=1 (deprecated)"
    assert (r.combine, r.combine_source) == (C.bf16, "auto")
    assert r.warnings == [
        "MOE_EP_FP8_DISP=1 is deprecated; use MOE_EP_DISPATCH_DTYPE=fp8 instead"]


def test_deprecated_fp4_honoured_with_the_value_as_written():
    r = resolve("fp8", env={"MOE_EP_FP4_DISP": "yes"})
    assert (r.dispatch, r.dispatch_source) == (D.fp4, DEPRECATED_SOURCE)  # beats auto (fp8)
    assert r.dispatch_origin == "MOE_EP_FP4_DISP=yes (deprecated)"
    assert r.combine == C.bf16
    assert count(r, "MOE_EP_FP4_DISP", "deprecated", "MOE_EP_DISPATCH_DTYPE=fp4") == 1


def test_deprecated_flags_used_when_the_new_variable_is_auto():
    r = resolve("bf16", env={"MOE_EP_DISPATCH_DTYPE": "auto", "MOE_EP_FP4_DISP": "1"})
    assert (r.dispatch, r.dispatch_source) == (D.fp4, DEPRECATED_SOURCE)


def test_deprecated_false_has_no_effect_but_warns():
    r = resolve("fp4", env={"MOE_EP_FP8_DISP": "0"})
    assert (r.dispatch, r.dispatch_source) == (D.fp4, "auto")
    assert count(r, "MOE_EP_FP8_DISP=0", "deprecated", "MOE_EP_DISPATCH_DTYPE") == 1


def test_one_deprecated_true_and_one_false_is_not_a_conflict():
    r = resolve("bf16", env={"MOE_EP_FP8_DISP": "0", "MOE_EP_FP4_DISP": "on"})
    assert (r.dispatch, r.dispatch_source) == (D.fp4, DEPRECATED_SOURCE)
    assert len(r.warnings) == 2  # each deprecated variable that is set is named


def test_both_deprecated_true_is_an_error_naming_both():
    msg = error_of(lambda: moe_ep.resolve_dtypes(
        "bf16", env={"MOE_EP_FP8_DISP": "1", "MOE_EP_FP4_DISP": "true"}))
    for name in ("MOE_EP_FP8_DISP", "MOE_EP_FP4_DISP", "MOE_EP_DISPATCH_DTYPE"):
        assert name in msg


def test_both_deprecated_true_is_ignored_when_something_stronger_decides():
    r = resolve("bf16", env={"MOE_EP_FP8_DISP": "1", "MOE_EP_FP4_DISP": "1",
                             "MOE_EP_DISPATCH_DTYPE": "fp8"})
    assert (r.dispatch, r.dispatch_source) == (D.fp8, "env")
    assert count(r, "MOE_EP_FP8_DISP=1", "ignored") == 1
    assert count(r, "MOE_EP_FP4_DISP=1", "ignored") == 1
    r = resolve("bf16", "bf16", env={"MOE_EP_FP8_DISP": "1", "MOE_EP_FP4_DISP": "1"})
    assert (r.dispatch, r.dispatch_source) == (D.bf16, "caller")
    assert count(r, "deprecated and ignored", "caller") == 2


def test_warnings_come_with_every_resolution():
    warning = "MOE_EP_FP8_DISP=1 is deprecated; use MOE_EP_DISPATCH_DTYPE=fp8 instead"
    first = resolve("bf16", env={"MOE_EP_FP8_DISP": "1"})
    second = resolve("fp4", env={"MOE_EP_FP8_DISP": "1"})
    assert first.warnings == second.warnings == [warning]


# ---------------------------------------------------------------------------------------------
# Parsing of the environment (dtype parts of ConfigKnobs)

@pytest.mark.parametrize("member", list(D))
def test_dispatch_variable_accepts_every_name(member):
    for text in (member.name, member.value):
        r = resolve("fp4", env={"MOE_EP_DISPATCH_DTYPE": text})
        assert (r.dispatch, r.dispatch_source) == (member, "env"), text
        assert r.dispatch_origin == f"MOE_EP_DISPATCH_DTYPE={text}"
        assert (r.combine, r.combine_source) == (C.fp8, "auto")  # the other leg is untouched


@pytest.mark.parametrize("member", list(C))
def test_combine_variable_accepts_every_name(member):
    for text in (member.name, member.value):
        r = resolve("fp8", env={"MOE_EP_COMBINE_DTYPE": text})
        assert (r.combine, r.combine_source) == (member, "env"), text
        assert r.combine_origin == f"MOE_EP_COMBINE_DTYPE={text}"
        assert (r.dispatch, r.dispatch_source) == (D.fp8, "auto")


@pytest.mark.parametrize("var,value,valid", [
    ("MOE_EP_DISPATCH_DTYPE", "fp16", VALID_DISPATCH),
    ("MOE_EP_DISPATCH_DTYPE", "fp8_direct_cast", VALID_DISPATCH),  # a combine-only format
    ("MOE_EP_DISPATCH_DTYPE", "FP8", VALID_DISPATCH),
    ("MOE_EP_DISPATCH_DTYPE", "", VALID_DISPATCH),
    ("MOE_EP_COMBINE_DTYPE", "fp4", VALID_COMBINE)])
def test_unknown_dtype_values_name_variable_value_and_valid_values(var, value, valid):
    msg = error_of(lambda: moe_ep.resolve_dtypes("bf16", env={var: value}))
    assert msg == f"{var}='{value}' is not a valid value; valid values: auto|{valid}"


@pytest.mark.parametrize("var,dtype", [("MOE_EP_FP8_DISP", D.fp8), ("MOE_EP_FP4_DISP", D.fp4)])
def test_deprecated_booleans_accept_the_usual_spellings(var, dtype):
    for yes in ("1", "true", "TRUE", "True", "yes", "YES", "on", "On"):
        r = resolve("bf16", env={var: yes})
        assert (r.dispatch, r.dispatch_source) == (dtype, DEPRECATED_SOURCE), yes
        assert r.dispatch_origin == f"{var}={yes} (deprecated)"
    for no in ("0", "false", "FALSE", "no", "No", "off", "OFF"):
        r = resolve("bf16", env={var: no})
        assert (r.dispatch, r.dispatch_source) == (D.bf16, "auto"), no
        assert count(r, f"{var}={no}", "deprecated", "no effect") == 1


@pytest.mark.parametrize("var", ["MOE_EP_FP8_DISP", "MOE_EP_FP4_DISP"])
def test_deprecated_booleans_reject_other_text(var):
    for bad in ("2", "y", "enable", " 1", ""):
        msg = error_of(lambda: moe_ep.resolve_dtypes("bf16", env={var: bad}))
        assert msg == f"{var}='{bad}' is not a valid value; valid values: {VALID_BOOL}"


def test_every_knob_of_the_env_dict_is_parsed():
    msg = error_of(lambda: moe_ep.resolve_dtypes("bf16", env={"MOE_EP_TIMEOUT_S": "abc"}))
    assert "MOE_EP_TIMEOUT_S='abc'" in msg and "a positive number of seconds" in msg


@pytest.mark.parametrize("kwargs,names", [
    ({"dispatch_dtype": "fp16"}, ["dispatch", "'fp16'", "auto|" + VALID_DISPATCH]),
    ({"combine_dtype": "fp4"}, ["combine", "'fp4'", "auto|" + VALID_COMBINE]),
    ({"dispatch_dtype": C.fp8_direct_cast}, ["dispatch_dtype"]),
    ({"weight_dtype": "int8"}, ["weight", "int8"])])
def test_bad_caller_values_are_value_errors_naming_the_argument(kwargs, names):
    kwargs = dict(kwargs)
    weights = kwargs.pop("weight_dtype", "bf16")
    msg = error_of(lambda: moe_ep.resolve_dtypes(weights, env={}, **kwargs))
    for name in names:
        assert name in msg


# ---------------------------------------------------------------------------------------------
# The process environment (env=None), in fresh interpreters

def run_python(code, **variables):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOE_EP_")}
    env.update(variables)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(moe_ep.__file__)), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()


PROCESS_ENV_SCRIPT = """
import os, warnings, moe_ep
r = moe_ep.resolve_dtypes("bf16")
print(r.dispatch.name, r.dispatch_source, r.dispatch_origin, r.combine.name, sep="|")
os.environ["MOE_EP_DISPATCH_DTYPE"] = "fp4"  # read once per process: no effect now
print(moe_ep.resolve_dtypes("bf16").dispatch.name)
op = moe_ep.get_op(moe_ep.CpuWorld(1).communicator(0), 8, 2, 256, 4)
print(op.config["dispatch_dtype"], op.config["combine_dtype"])
"""


def test_process_environment_is_read_once():
    lines = run_python(PROCESS_ENV_SCRIPT, MOE_EP_DISPATCH_DTYPE="fp8")
    assert lines[0] == "fp8|env|MOE_EP_DISPATCH_DTYPE=fp8|bf16"
    assert lines[1] == "fp8"
    assert lines[2].split()[0] in ("fp8", "float8_blockwise")  # get_op resolves "auto" too
    assert lines[2].split()[1] in ("bf16", "bfloat16")


DEPRECATED_SCRIPT = """
import warnings, moe_ep
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    r = moe_ep.resolve_dtypes("bf16")
print(r.dispatch.name, r.dispatch_source)
print([(x.category.__name__, str(x.message)) for x in w])
try:
    moe_ep.resolve_dtypes("bf16", env={"MOE_EP_FP8_DISP": "1", "MOE_EP_FP4_DISP": "1"})
except ValueError as e:
    print("ValueError", type(e).__name__)
"""


def test_process_environment_deprecated_flag():
    lines = run_python(DEPRECATED_SCRIPT, MOE_EP_FP4_DISP="1")
    assert lines[0] == f"fp4 {DEPRECATED_SOURCE}"
    assert lines[1] == str([("DeprecationWarning",
                             "MOE_EP_FP4_DISP=1 is deprecated; use MOE_EP_DISPATCH_DTYPE=fp4 "
                             "instead")])
    assert lines[2] == "ValueError InvalidArgument"


def test_process_environment_bad_value_is_an_error():
    code = ("import moe_ep\ntry:\n    moe_ep.resolve_dtypes('bf16')\n"
            "except ValueError as e:\n    print(type(e).__name__, e)\n")
    lines = run_python(code, MOE_EP_COMBINE_DTYPE="fp16")
    assert lines == ["InvalidArgument MOE_EP_COMBINE_DTYPE='fp16' is not a valid value; "
                     "valid values: auto|" + VALID_COMBINE]
