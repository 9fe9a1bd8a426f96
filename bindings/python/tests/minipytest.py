"""The part of pytest the torch tests use, for machines without pytest.

    try:
        import pytest
    except ImportError:
        import minipytest as pytest
    ...
    if __name__ == "__main__":
        sys.exit(pytest.main([__file__]))

Supports ``pytest.mark.parametrize`` (stacked, with ``ids``),
``pytest.mark.skipif`` (also as ``pytestmark``), ``pytest.skip`` and
``pytest.raises`` (with ``match``). ``main`` runs every ``test_*`` function
of the calling script's module and prints one line per case, then a pytest
style summary; it returns 1 when a case failed, 5 when nothing ran.
"""
import inspect
import itertools
import re
import sys
import traceback


class _Skipped(Exception):
    pass


def skip(reason=""):
    raise _Skipped(reason)


class _Mark:
    def parametrize(self, names, values, ids=None):
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)

        def deco(fn):
            cases = []
            for i, value in enumerate(values):
                value = value if len(names) > 1 else (value,)
                label = ids[i] if ids else "-".join(str(x) for x in value)
                cases.append((label, dict(zip(names, value))))
            fn.__dict__.setdefault("_params", []).insert(0, cases)
            return fn
        return deco

    def skipif(self, condition, reason=""):
        def deco(fn):
            if condition:
                fn.__dict__.setdefault("_skip", reason)
            return fn
        deco.condition, deco.reason = condition, reason
        return deco


mark = _Mark()


class raises:
    def __init__(self, expected, match=None):
        self.expected, self.match = expected, match

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            raise AssertionError(f"DID NOT RAISE {self.expected}")
        if not issubclass(kind, self.expected):
            return False
        if self.match is not None and not re.search(self.match, str(value)):
            raise AssertionError(f"{self.match!r} does not match {str(value)!r}")
        self.value = value
        return True


def main(args=None):
    module = sys.modules["__main__"]
    module_skip = getattr(module, "pytestmark", None)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for name, fn in list(vars(module).items()):
        if not name.startswith("test_") or not inspect.isfunction(fn):
            continue
        grids = fn.__dict__.get("_params", [])
        for combo in itertools.product(*grids) if grids else [()]:
            label = name + ("[" + "-".join(c[0] for c in combo) + "]" if combo else "")
            kwargs = {}
            for _, kw in combo:
                kwargs.update(kw)
            reason = fn.__dict__.get("_skip")
            if module_skip is not None and module_skip.condition:
                reason = module_skip.reason
            try:
                if reason is not None:
                    raise _Skipped(reason)
                fn(**kwargs)
                counts["passed"] += 1
                print(f"PASSED  {label}", flush=True)
            except _Skipped as e:
                counts["skipped"] += 1
                print(f"SKIPPED {label}: {e}", flush=True)
            except Exception:
                counts["failed"] += 1
                print(f"FAILED  {label}\n{traceback.format_exc()}", flush=True)
    print(", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no tests ran")
    if counts["failed"]:
        return 1
    return 0 if counts["passed"] else 5
