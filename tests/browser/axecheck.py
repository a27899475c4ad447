"""Accessibility of one page: axe-core's WCAG 2.0 and 2.1 rules (levels A and AA), and the
keyboard's way into every block that scrolls.

axe-core is the engine Deque maintains; its script comes inside the axe-playwright-python
wheel (pinned in requirements.txt), so nothing is fetched while the test runs. ``check_accessibility``
runs it on an open page, in the state the reading checks left it (every dropdown, hint and answer
open), in light mode at desktop and at phone width and, for colour contrast alone, in dark mode;
a serious or critical violation is a problem that names the rule, the width and a node. The
counts by impact go to the page's line in the summary.

axe judges a block that scrolls reachable when it or something in it takes the focus. The book
asks a little more, and checks it itself: the block is reachable as soon as the layout changes
(the theme's own tab stops follow 300 ms after a resize), a block made focusable has a role and
a name for a screen reader, and its focus ring is drawn where nothing clips it.
"""

from __future__ import annotations

import contextlib

from axe_playwright_python.sync_playwright import Axe

WCAG_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")
IMPACTS = ("critical", "serious", "moderate", "minor")
FAILING = ("critical", "serious")
# The runs on each page: name, colour mode, width, axe's options. Colours do not depend on the
# width, and nothing but colours on the mode: dark mode runs the contrast rule alone, once.
# preload: False, or axe fetches every style sheet again, and resolves an @import against the
# page instead of the sheet that imports it (the theme's "../basic.css": a request that fails).
# The one rule that reads them, css-orientation-lock, then reports "needs review" instead: the
# book never locks the orientation.
ALL_RULES = {"runOnly": {"type": "tag", "values": list(WCAG_TAGS)}, "resultTypes": ["violations"], "preload": False}
CONTRAST = {"runOnly": {"type": "rule", "values": ["color-contrast"]}, "resultTypes": ["violations"], "preload": False}

_axe = None


def axe() -> Axe:
    """The bundled axe-core, read from the wheel once."""
    global _axe
    if _axe is None:
        _axe = Axe()
    return _axe


def runs(desktop: dict, phone: dict) -> list[tuple[str, str, dict, dict]]:
    """Return the (label, mode, viewport, options) of each axe run on a page."""
    return [
        (f"{desktop['width']} px", "light", desktop, ALL_RULES),
        (f"{phone['width']} px", "light", phone, ALL_RULES),
        (f"{desktop['width']} px dark", "dark", desktop, CONTRAST),
    ]


# The layout after a resize: the theme's side drawers slide for 0.2 s, and a block's tab stop
# follows its size a frame later. Wait for the slides (at most a second), then two frames.
_SETTLED_JS = """async () => {
  const frame = () => new Promise(done => requestAnimationFrame(() => done()));
  await frame();
  const slides = document.getAnimations().filter(a => a instanceof CSSTransition).map(a => a.finished);
  await Promise.race([Promise.allSettled(slides), new Promise(done => setTimeout(done, 1000))]);
  await frame();
  await frame();
}"""

_MODE_JS = """mode => {
  document.documentElement.dataset.mode = mode;
  document.documentElement.dataset.theme = mode;
}"""


def check_accessibility(page, report, desktop: dict, phone: dict) -> None:
    """Run axe on ``page`` at both widths (and dark mode); record problems and counts in ``report``."""
    report.axe = {}
    try:
        for label, mode, size, options in runs(desktop, phone):
            page.evaluate(_MODE_JS, mode)
            page.set_viewport_size(size)
            # Not the 400 ms the layout checks wait: a reader who turns a phone and presses Tab
            # at once must reach the blocks that now scroll.
            page.evaluate(_SETTLED_JS)
            if mode == "light":
                check_scrollers(page, report, label)
            violations = axe().run(page, options=options).response["violations"]
            report.axe[label] = {impact: 0 for impact in IMPACTS}
            for violation in violations:
                impact = violation.get("impact") or "minor"
                report.axe[label][impact] = report.axe[label].get(impact, 0) + len(violation["nodes"])
                report.check(impact not in FAILING, describe(violation, label))
    finally:
        with contextlib.suppress(Exception):
            page.evaluate(_MODE_JS, "light")
            page.set_viewport_size(desktop)


def describe(violation: dict, label: str) -> str:
    """One line: rule, impact, width, how many nodes, the first node's selector and axe's reason."""
    nodes = violation["nodes"]
    first = nodes[0] if nodes else {}
    selector = " ".join(str(t) for t in first.get("target", [])) or "?"
    why = ""
    for key in ("any", "all", "none"):
        if first.get(key):
            why = first[key][0].get("message", "")
            break
    more = f" (+{len(nodes) - 1} more)" if len(nodes) > 1 else ""
    return (
        f"axe {violation['id']} ({violation.get('impact')}) at {label}: {selector}{more}:"
        f" {_short(why or violation.get('help', ''), 160)}"
    )


def summary(counts: dict) -> str:
    """Return the counts of each run as 'axe 1280 px 0/0/0/0, ...' (critical/serious/moderate/minor)."""
    if not counts:
        return ""
    runs_ = ", ".join(f"{label} {'/'.join(str(c.get(i, 0)) for i in IMPACTS)}" for label, c in counts.items())
    return f"axe ({'/'.join(IMPACTS)}): {runs_}"


def _short(text: str, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Blocks that scroll: reachable now, named, and with a focus ring nothing clips
# ---------------------------------------------------------------------------------------------

# Every visible element of the article that scrolls (overflow auto or scroll, content larger than
# its box): is it, or something in it, a tab stop? A tab stop that is no control of its own needs
# a role and a name. MathJax gives each formula its own tab stop and speech.
_SCROLLERS_JS = """() => {
  const FOCUSABLE = 'a[href], button, input, select, textarea, summary, iframe, [contenteditable], ' +
    '[tabindex]:not([tabindex="-1"])';
  const CONTROLS = 'a, button, input, select, textarea, summary, mjx-container';
  const scrolls = (el, s) =>
    (['auto', 'scroll'].includes(s.overflowX) && el.scrollWidth > el.clientWidth) ||
    (['auto', 'scroll'].includes(s.overflowY) && el.scrollHeight > el.clientHeight);
  const describe = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (el.classList.length ? '.' + [...el.classList].slice(0, 2).join('.') : '') +
    ` in #${(el.closest('section[id]') || {}).id || '?'}`;
  document.querySelectorAll('[data-axecheck-first]').forEach(el => el.removeAttribute('data-axecheck-first'));
  const out = {unreachable: [], unnamed: [], named: 0, first: null};
  for (const el of document.querySelectorAll('main *')) {
    const s = getComputedStyle(el);
    if (!scrolls(el, s) || !el.checkVisibility({visibilityProperty: true})) continue;
    if (el.tabIndex < 0 && !el.querySelector(FOCUSABLE)) {
      out.unreachable.push(describe(el));
    } else if (el.tabIndex >= 0 && !el.matches(CONTROLS)) {
      const named = el.getAttribute('role') &&
        (el.getAttribute('aria-label') || el.getAttribute('aria-labelledby'));
      if (named) {
        out.named += 1;
        if (!out.first) { out.first = el; el.setAttribute('data-axecheck-first', ''); }
      } else out.unnamed.push(describe(el));
    }
  }
  delete out.first;
  return out;
}"""

# The focused element's ring: drawn at all, and not cut off by a box around it that clips.
_RING_JS = """el => {
  if (document.activeElement !== el) return {focused: false};
  const s = getComputedStyle(el);
  const width = parseFloat(s.outlineWidth) || 0, offset = parseFloat(s.outlineOffset) || 0;
  const reach = width + offset;  // how far the ring reaches outside the element's border box
  const r = el.getBoundingClientRect();
  const ring = {left: r.left - reach, right: r.right + reach, top: r.top - reach, bottom: r.bottom + reach};
  let clippedBy = null;
  for (let a = el.parentElement; a && a !== document.body && !clippedBy; a = a.parentElement) {
    const as = getComputedStyle(a);
    if (as.overflowX === 'visible' && as.overflowY === 'visible') continue;
    const b = a.getBoundingClientRect();
    if (ring.left < b.left - 0.5 || ring.right > b.right + 0.5 ||
        ring.top < b.top - 0.5 || ring.bottom > b.bottom + 0.5) {
      clippedBy = a.tagName.toLowerCase() + (a.classList.length ? '.' + [...a.classList].slice(0, 2).join('.') : '');
    }
  }
  return {focused: true, style: s.outlineStyle, width: width, visible: el.matches(':focus-visible'),
          clippedBy: clippedBy};
}"""

MIN_RING_PX = 2


def check_scrollers(page, report, label: str) -> None:
    """Every block that scrolls is reachable by keyboard now; a focusable one has a role and a
    name; the first one, reached with Tab, shows a focus ring at least MIN_RING_PX wide that no
    scrolling box around it cuts off."""
    found = page.evaluate(_SCROLLERS_JS)
    report.check(
        not found["unreachable"],
        f"at {label} {len(found['unreachable'])} block(s) scroll but a keyboard cannot reach them"
        f" (no tab stop in or on them): " + _list(found["unreachable"]),
    )
    report.check(
        not found["unnamed"],
        f"at {label} {len(found['unnamed'])} scrolling block(s) take the focus without a role and a"
        f" name for a screen reader: " + _list(found["unnamed"]),
    )
    first = page.locator("[data-axecheck-first]")
    if not found["named"] or first.count() != 1:
        return
    element = first.element_handle()
    try:
        element.evaluate("el => { el.removeAttribute('data-axecheck-first'); el.focus(); }")
        page.keyboard.press("Shift+Tab")  # reach it with the keyboard, as a reader does
        page.keyboard.press("Tab")
        ring = element.evaluate(_RING_JS)
    finally:
        page.evaluate("() => { const a = document.activeElement; a && a.blur && a.blur(); }")
    name = element.evaluate("el => el.getAttribute('aria-label') || el.tagName.toLowerCase()")
    if not report.check(ring["focused"], f"at {label} Tab does not reach the scrolling block '{name}'"):
        return
    report.check(
        ring["visible"] and ring["style"] not in ("none", "hidden") and ring["width"] >= MIN_RING_PX,
        f"at {label} the scrolling block '{name}' shows no focus ring of at least {MIN_RING_PX} px"
        f" when reached with Tab (outline {ring['style']} {ring['width']:g} px)",
    )
    report.check(
        not ring["clippedBy"],
        f"at {label} the focus ring of the scrolling block '{name}' is cut off by the {ring['clippedBy']} around it",
    )


def _list(items: list[str], limit: int = 5) -> str:
    distinct = list(dict.fromkeys(items))
    more = f" (+{len(distinct) - limit} more)" if len(distinct) > limit else ""
    return "; ".join(distinct[:limit]) + more
