"""Runs every ```python block of docs/sdk.md, each in a fresh namespace with
mailer_plugin importable, so the reference's examples (and the asserts they
end with) stay true (`python3 -m unittest` in this folder)."""

import pathlib
import re
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
DOC = HERE.parent.parent / "docs" / "sdk.md"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(text: str):
    """(line of the opening fence, code) of each ```python block."""
    for m in FENCE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


class SdkDocTest(unittest.TestCase):
    def test_every_python_example_of_the_sdk_reference_runs(self):
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        found = list(blocks(DOC.read_text(encoding="utf-8")))
        self.assertGreater(len(found), 0, f"{DOC} has no ```python block")
        for line, code in found:
            with self.subTest(f"docs/sdk.md:{line}"):
                # Blank lines in front, so a traceback names the doc's lines.
                source = "\n" * line + code
                exec(compile(source, str(DOC), "exec"), {"__name__": f"sdk_doc_{line}"})


if __name__ == "__main__":
    unittest.main()
