"""An env file whose inline comment holds a quote that a later quote pairs with (issue "Security fix first").

python-dotenv reads every line of it. The reader's former bulk path took the stretch from the comment's quote
to the next quote (``NOTE='' # it's ...`` .. ``GREETING=don't``) as one quoted value and dropped every line
in between: the pin (``GPU_ENV_HOOK_POD_UID``) or a refused key placed there went unseen. The file has 16
lines and more on both sides of that stretch, as the bulk path needed.
"""

from __future__ import annotations

QUOTE_SHAPES = {
    "'": ("NOTE='' # it's the plugin file", "GREETING=don't"),
    '"': ('NOTE="" # the plugin says "hi', 'SAY=say "bye'),
}


def comment_quote_file(hidden: str, *, quote: str = "'") -> str:
    """The file, with ``hidden`` (a line such as ``GPU_ENV_HOOK_POD_UID=uid-1``) between the comment's
    quote and the next quote; the devices line comes first, outside that stretch."""
    comment_line, closing_line = QUOTE_SHAPES[quote]
    lines = [
        "# written by the device plugin",
        "NVIDIA_VISIBLE_DEVICES=0,1",
        comment_line,
        *(f"APP_{index}=value-{index}" for index in range(8)),
        hidden,
        *(f"APP_{index}=value-{index}" for index in range(8, 12)),
        closing_line,
        *(f"OTHER_{index}=value-{index}" for index in range(20)),
        "USER_CUSTOM_ENV=hello",
    ]
    return "\n".join(lines) + "\n"


def hidden_line(text: str, hidden: str) -> int:
    """The 1-based line ``hidden`` is on in ``text``."""
    return text.split("\n").index(hidden) + 1
