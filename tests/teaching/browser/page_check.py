"""Checks the teaching page (`normcheck demo --html FILE`) in headless Chromium, over the DevTools pipe.

    page_check.py --normcheck EXE --work DIR --checks static,load,screenshot,figures,narrow,keyboard,numbers
    page_check.py --normcheck EXE --work DIR --checks lab,runs,differential --runs tests/teaching/lab_runs.json
    page_check.py --normcheck EXE --work DIR --self-test --runs tests/teaching/lab_runs.json
    page_check.py ... --partition FILE    the page built on a partition file, compared with the demos on it

Each check prints what it found and the run fails if any check finds a problem. --self-test breaks the
page in one way per check (an exception, a network request, a wide element, a number, a lab message, the
lab's arithmetic, ...) and requires the check meant to catch it to fail: a check that cannot fail is no
check. Exit status 77 (skipped) only when /usr/bin/chromium is not installed. One browser per run, with a
time limit, its process group ended at the end.
"""

import argparse
import base64
import json
import os
import re
import struct
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ElementTree
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cdp  # noqa: E402
import lab_runs  # noqa: E402

SKIP = 77
DEMOS = ["derivation", "accumulation", "reducers", "disguise"]
DESKTOP = {"width": 1000, "height": 800, "deviceScaleFactor": 1, "mobile": False}
NARROW = {"width": 360, "height": 740, "deviceScaleFactor": 1, "mobile": True}
MISTAKEN_COLOR = (0xC0, 0x39, 0x2B)
CORRECT_COLOR = (0x1F, 0x6F, 0x8B)
LAB_CONTROLS = ["lab-lr", "lab-x", "lab-predict", "lab-steps", "lab-reset", "lab-show", "lab-help", "lab-command",
                "lab-start-over"]
LAB_BUTTONS = ["Set lr", "Set x", "Predict", "Step", "Run"]


class Context:
    """What the checks share: the browser, the page under test and the command line to compare with."""

    def __init__(self, browser, normcheck, page_path, work, partition, runs_path):
        self.browser = browser
        self.normcheck = normcheck
        self.page_path = page_path
        self.url = "file://" + os.path.abspath(page_path)
        self.work = work
        self.partition = partition
        self.runs_path = runs_path
        self.first_problem_only = False  # the self-test needs one problem per broken page, not all
        self._cli = {}

    def open(self, metrics=DESKTOP):
        """A fresh tab on the page, every event domain enabled before it loads."""
        page = self.browser.new_page()
        for domain in ("Runtime", "Log", "Network", "Page"):
            page.send(domain + ".enable")
        page.send("Emulation.setDeviceMetricsOverride", metrics)
        page.navigate(self.url)
        return page

    def close(self, page):
        try:
            self.browser.send("Target.closeTarget",
                              {"targetId": page.send("Target.getTargetInfo")["targetInfo"]["targetId"]})
        except cdp.BrowserError:
            pass
        self.browser.events = [e for e in self.browser.events if e.get("sessionId") != page.session_id]

    def cli(self, *arguments):
        """Standard output of normcheck ARGUMENTS (on the partition, if any, for demos), cached."""
        if arguments not in self._cli:
            command = [self.normcheck] + list(arguments)
            if arguments[0] == "demo" and self.partition:
                command += ["--partition", self.partition]
            result = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", timeout=60)
            if result.returncode != 0:
                raise AssertionError("%s failed with %d: %s" % (" ".join(command), result.returncode, result.stderr))
            self._cli[arguments] = result.stdout
        return self._cli[arguments]


def settle(page):
    """Waits until the page has laid out and painted twice."""
    page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def png_pixels(data):
    """The pixels of an 8-bit RGB or RGBA PNG as (red, green, blue) tuples over white, row after row.
    Screenshots are taken with optimizeForSpeed, which filters every row with Up (type 2), the fast path."""
    pos, chunks, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError("unsupported PNG: depth %d, colour type %d, interlace %d" % (depth, colour, interlace))
    channels = 4 if colour == 6 else 3
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    previous = bytes(stride)
    pixels = []
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous))
        elif kind != 0:  # Sub, Average, Paeth: the slow general path
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                up = previous[i]
                corner = previous[i - channels] if i >= channels else 0
                if kind == 1:
                    predictor = left
                elif kind == 3:
                    predictor = (left + up) >> 1
                else:
                    p = left + up - corner
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                    predictor = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + predictor) & 0xFF
        previous = bytes(line)
        if channels == 3:
            pixels.extend(zip(line[0::3], line[1::3], line[2::3]))
        else:
            for r, g, b, a in zip(line[0::4], line[1::4], line[2::4], line[3::4]):
                pixels.append(tuple((v * a + 255 * (255 - a)) // 255 for v in (r, g, b)))
    return width, height, pixels


def screenshot(page, clip=None):
    """(width, height, pixels) of the page, or of the clip in document coordinates."""
    params = {"format": "png", "optimizeForSpeed": True}
    if clip:
        params["clip"] = clip
        params["captureBeyondViewport"] = True
    return png_pixels(base64.b64decode(page.send("Page.captureScreenshot", params, timeout=30)["data"]))


def count_close(pixels, colour, tolerance=24):
    """How many pixels are within `tolerance` of `colour` in every channel."""
    red, green, blue = colour
    return sum(1 for r, g, b in pixels
               if abs(r - red) <= tolerance and abs(g - green) <= tolerance and abs(b - blue) <= tolerance)


# ---------------------------------------------------------------------------------------------
# The checks. Each returns a list of problems (empty: passed) and prints what it measured.

def check_static(ctx):
    """The file refers to nothing outside itself and holds one script and its JSON data."""
    with open(ctx.page_path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    for pattern, what in [(r"https?://", "an http:// or https:// reference"), (r"\ssrc\s*=", "a src attribute"),
                          (r"<link\b", "a <link> element"), (r"@import", "a CSS @import"),
                          (r"url\(\s*['\"]?(?!#)", "a CSS url() that is not a fragment"),
                          (r"<(iframe|object|embed|img|audio|video)\b", "an embedded resource"),
                          (r"\shref\s*=\s*\"(?!#)", "a link that leaves the page")]:
        found = re.search(pattern, text, re.IGNORECASE)
        if found:
            start = max(found.start() - 40, 0)
            problems.append("the page holds %s: ...%s..." % (what, text[start:found.end() + 40]))
    scripts = re.findall(r"<script\b([^>]*)>", text)
    if sorted(scripts) != sorted(['', ' type="application/json" id="lab-data"']):
        problems.append("expected one script and one JSON data element, found script tags %r" % scripts)
    print("static: %d bytes, %d script tags" % (len(text.encode("utf-8")), len(scripts)))
    return problems


def check_load(ctx):
    """The page loads with no console message of level error or warning, no exception, and no request
    other than the file itself; its script has run."""
    page = ctx.open()
    try:
        settle(page)
        ready = page.evaluate("document.readyState + ' ' + typeof normcheckLab")
        ctx.browser.pump(0.3)
        problems = []
        for event in page.events("Runtime.exceptionThrown"):
            details = event["params"]["exceptionDetails"]
            problems.append("exception: %s" % (details.get("exception", {}).get("description") or details.get("text")))
        for event in page.events("Runtime.consoleAPICalled"):
            if event["params"]["type"] in ("error", "warning", "assert"):
                args = [a.get("value", a.get("description")) for a in event["params"]["args"]]
                problems.append("console %s: %r" % (event["params"]["type"], args))
        for event in page.events("Log.entryAdded"):
            entry = event["params"]["entry"]
            if entry["level"] in ("error", "warning"):
                problems.append("browser log %s: %s" % (entry["level"], entry["text"]))
        requests = [e["params"]["request"]["url"] for e in page.events("Network.requestWillBeSent")]
        others = [url for url in requests if url != ctx.url]
        if others:
            problems.append("requests other than the page itself: %r" % others)
        if ctx.url not in requests:
            problems.append("the page's own request was not seen, so requests are not being recorded")
        if ready != "complete function":
            problems.append("after load: readyState and the lab's script are %r, expected 'complete function'" % ready)
        print("load: requests %r, state %r" % (requests, ready))
        return problems
    finally:
        ctx.close(page)


def check_screenshot(ctx):
    """The first screen of the page is not blank: more than 2% of its pixels differ from white."""
    page = ctx.open()
    try:
        settle(page)
        width, height, pixels = screenshot(page, {"x": 0, "y": 0, "width": DESKTOP["width"],
                                                  "height": DESKTOP["height"], "scale": 0.5})
        drawn = sum(1 for pixel in pixels if pixel != (255, 255, 255))
        fraction = drawn / float(width * height)
        print("screenshot: %dx%d, %.1f%% of the pixels drawn" % (width, height, 100 * fraction))
        return [] if fraction > 0.02 else ["the screenshot is blank: %.2f%% of its pixels drawn" % (100 * fraction)]
    finally:
        ctx.close(page)


def check_figures(ctx):
    """Both figures are inline images with a text alternative computed from the data; both series are
    drawn, and the mistaken series is hatched, so the figure reads without colour."""
    page = ctx.open()
    problems = []
    try:
        for figure in ("derivation-figure", "disguise-figure"):
            info = page.call("""(id) => {
                const svg = document.querySelector('#' + id + ' svg');
                if (!svg) return null;
                const name = (svg.getAttribute('aria-labelledby') || '').split(' ').filter(Boolean)
                    .map(ref => (document.getElementById(ref) || {}).textContent || '').join(' ');
                svg.scrollIntoView({block: 'start'});
                const r = svg.getBoundingClientRect();
                const hatched = [...svg.querySelectorAll('rect[fill="#c0392b"]')]
                    .map(rect => getComputedStyle(rect).fill);
                return {role: svg.getAttribute('role'), name,
                        texts: [...svg.querySelectorAll('text')].map(t => t.textContent),
                        rect: {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}, hatched};
            }""", figure)
            if info is None:
                problems.append("%s: no inline SVG" % figure)
                continue
            if info["role"] != "img":
                problems.append("%s: role is %r, expected img" % (figure, info["role"]))
            settle(page)
            clip = dict(info["rect"], scale=1)
            width, height, pixels = screenshot(page, clip)
            counts = {"mistaken": count_close(pixels, MISTAKEN_COLOR), "correct": count_close(pixels, CORRECT_COLOR)}
            print("figures: %s %dx%d, series pixels %r, name %r" % (figure, width, height, counts, info["name"][:90]))
            if min(counts.values()) < 50:
                problems.append("%s: a series is missing from the rendered figure: %r" % (figure, counts))
            if figure == "derivation-figure":
                if not info["hatched"] or any("url(" not in fill for fill in info["hatched"]):
                    problems.append("%s: the mistaken series is not hatched (fills %r)" % (figure, info["hatched"][:3]))
                # The text alternative names each bar's value, as the figure's labels do.
                values = [t for t in info["texts"] if re.fullmatch(r"-?\d+(/\d+)?", t)]
                missing = [v for v in values if v not in info["name"]]
                if not values or missing:
                    problems.append("%s: the text alternative lacks the values %r" % (
                        figure, missing or "(none drawn)"))
            else:
                parts = [t for t in info["texts"] if "parts at step" in t or "never parts" in t]
                for title in parts:
                    feature = title.split(":")[0]
                    if feature + ":" not in info["name"]:
                        problems.append("%s: the text alternative does not describe %r" % (figure, feature))
                if not parts:
                    problems.append("%s: no panel titles found" % figure)
            if problems and ctx.first_problem_only:
                break
        return problems
    finally:
        ctx.close(page)


def check_narrow(ctx):
    """At 360 CSS pixels wide the page does not scroll sideways (wide tables and algebra scroll inside
    their own regions) and every lab control fits."""
    page = ctx.open(NARROW)
    try:
        settle(page)
        found = page.evaluate("""(() => {
            const width = document.documentElement.clientWidth;
            const outside = [];
            for (const el of document.body.querySelectorAll('*')) {
                if (el.closest('.scroll') || el.closest('svg.patterns') || el.closest('.skip')) continue;
                const r = el.getBoundingClientRect();
                if (r.width > 0 && r.right > width + 0.5)
                    outside.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + ' right '
                                 + Math.round(r.right));
            }
            const controls = [...document.querySelectorAll('#lab button, #lab input')].filter(el => {
                const r = el.getBoundingClientRect();
                return r.right > width + 0.5 || r.left < -0.5;
            }).map(el => el.id || el.textContent);
            return {width, innerWidth, scrollWidth: document.documentElement.scrollWidth, outside: outside.slice(0, 5),
                    controls};
        })()""")
        print("narrow: %r" % found)
        problems = []
        if found["innerWidth"] != NARROW["width"]:
            problems.append("the viewport is %d px wide, expected %d" % (found["innerWidth"], NARROW["width"]))
        if found["scrollWidth"] > found["width"]:
            problems.append("the page scrolls sideways at %d px: its content is %d px wide; outside: %r" % (
                found["width"], found["scrollWidth"], found["outside"]))
        elif found["outside"]:
            problems.append("elements reach beyond the right edge at %d px: %r" % (found["width"], found["outside"]))
        if found["controls"]:
            problems.append("lab controls do not fit at %d px: %r" % (found["width"], found["controls"]))
        return problems
    finally:
        ctx.close(page)


FOCUSED = """(() => {
    const el = document.activeElement;
    if (!el || el === document.body) return null;
    const style = getComputedStyle(el);
    const visible = (style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2)
        || style.boxShadow !== 'none';
    return {id: el.id, tag: el.tagName.toLowerCase(), text: (el.textContent || '').trim().slice(0, 40),
            focusVisible: el.matches(':focus-visible'), indicator: visible};
})()"""


def last_entry(page):
    return page.evaluate("""(() => {
        const entries = document.querySelectorAll('#lab-log .lab-entry');
        const e = entries[entries.length - 1];
        if (!e) return null;
        const reply = e.querySelector('.lab-reply');
        return {count: entries.length, status: e.dataset.status,
                lines: reply ? reply.textContent.split('\\n') : []};
    })()""")


def check_keyboard(ctx):
    """Tab reaches every lab control with a visible focus indicator, the skip link leads to the lab, and
    the lesson's first step can be taken with the keyboard alone."""
    page = ctx.open()
    problems = []
    try:
        settle(page)
        page.tab()
        skip = page.evaluate(FOCUSED)
        if not skip or "lab" not in skip["text"].lower():
            problems.append("the first Tab stop is %r, expected the skip link to the lab" % skip)
            if ctx.first_problem_only:
                return problems
        seen = [skip] if skip else []
        for _ in range(150):
            page.tab()
            focused = page.evaluate(FOCUSED)
            if focused is None:
                continue
            seen.append(focused)
            if focused["id"] == "lab-start-over":
                break
        ids = {f["id"] for f in seen}
        buttons = {f["text"] for f in seen if f["tag"] == "button"}
        missing = [c for c in LAB_CONTROLS if c not in ids] + [b for b in LAB_BUTTONS if b not in buttons]
        if missing:
            problems.append("Tab never reaches %r (reached %d elements)" % (missing, len(seen)))
        unmarked = sorted({f["id"] or f["text"] for f in seen if not (f["focusVisible"] and f["indicator"])})
        if unmarked:
            problems.append("focus is not visible on %r" % unmarked[:6])
        print("keyboard: Tab reached %d elements, lab controls %s" % (len(seen), "all" if not missing else "not all"))
        if problems and ctx.first_problem_only:
            return problems

        # The lesson by keyboard: the skip link, then values typed and forms submitted with Enter.
        page.navigate(ctx.url)
        settle(page)
        page.tab()
        page.enter()
        settle(page)

        def tab_to(element_id, text=None):
            for _ in range(12):
                page.tab()
                focused = page.evaluate(FOCUSED)
                if focused and focused["id"] == element_id and (text is None or focused["text"] == text):
                    return True
            problems.append("after the skip link, Tab does not reach %s" % (element_id or text))
            return False

        steps = [("lab-lr", "0.1", "lr = 1/10 (≈ 0.1)"), ("lab-x", "2", "x0 = 2"),
                 ("lab-steps", "", "x1 = 9/5 (≈ 1.8)")]
        for element_id, value, expected in steps:
            if not tab_to(element_id):
                break
            if value:
                page.type_text(value)
            page.enter()
            entry = last_entry(page)
            if not entry or entry["lines"][:1] != [expected]:
                problems.append("typing %r into %s and pressing Enter shows %r, expected %r" % (
                    value, element_id, entry, expected))
        if tab_to("lab-reset"):
            page.key(" ", code="Space", key_code=32, text=" ")
            entry = last_entry(page)
            if not entry or not entry["lines"][0].startswith("reset:"):
                problems.append("Space on the Reset button shows %r" % entry)
        return problems
    finally:
        ctx.close(page)


# ---- the numbers ----

def parse_markdown(text):
    """A demo's Markdown (render_markdown) as {title, sections: [{heading, blocks}]}."""
    document = {"title": None, "sections": []}
    lines = text.split("\n")
    i = 0

    def add(block):
        document["sections"][-1]["blocks"].append(block)

    def cells(row):
        return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)[1:-1]]

    while i < len(lines):
        line = lines[i]
        if line.startswith("# "):
            document["title"] = line[2:]
        elif line.startswith("## "):
            document["sections"].append({"heading": line[3:], "blocks": []})
        elif line.startswith("```"):
            j = i + 1
            while lines[j] != "```":
                j += 1
            add(["display", lines[i + 1:j]])
            i = j
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            add(["table", rows[0], rows[2:]])
            continue
        elif line.strip():
            add(["p", line.replace("`", "")])
        i += 1
    return document


PAGE_DOCUMENT = """(name) => {
    const article = document.getElementById(name);
    if (!article) return null;
    const doc = {title: article.querySelector('h2').textContent, sections: []};
    for (const section of article.querySelectorAll(':scope > section:not(.glance)')) {
        const s = {heading: section.querySelector('h3').textContent, blocks: []};
        for (const el of section.querySelectorAll('p, pre.display, table')) {
            if (el.tagName === 'P') s.blocks.push(['p', el.textContent.replaceAll('`', '')]);
            else if (el.tagName === 'PRE') s.blocks.push(['display', el.textContent.split('\\n')]);
            else s.blocks.push(['table', [...el.tHead.rows[0].cells].map(c => c.textContent.trim()),
                                [...el.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent.trim()))]);
        }
        doc.sections.push(s);
    }
    return doc;
}"""


def value_of(line):
    """The value a display line ends with: "… = V (≈ a)" or "label: V" gives V."""
    line = re.sub(r" \(≈ [^)]*\)$", "", line.strip())
    if line.endswith("undefined"):
        return "undefined"
    return re.split(r" = |: ", line)[-1].strip()


def derivation_facts_from_cli(document):
    """The derivation's numbers as `normcheck demo derivation --markdown` prints them."""
    def section(prefix):
        for s in document["sections"]:
            if s["heading"].startswith(prefix):
                return s
        raise AssertionError("normcheck demo derivation has no section starting %r" % prefix)

    def blocks(s, kind):
        return [b for b in s["blocks"] if b[0] == kind]

    def line(s, start):
        for b in blocks(s, "display"):
            for text in b[1]:
                if text.strip().startswith(start):
                    return text
        raise AssertionError("no line starting %r in section %r" % (start, s["heading"]))

    def line_containing(s, text):
        for b in blocks(s, "display"):
            for candidate in b[1]:
                if text in candidate:
                    return candidate
        raise AssertionError("no line with %r in section %r" % (text, s["heading"]))

    facts = {}
    update = section("The update and its objective")
    for row in blocks(update, "table")[0][2]:
        if row[0].isdigit():
            facts["rank-sum-" + row[0]] = row[3]
            facts["rank-mean-" + row[0]] = "undefined" if row[4].startswith("undefined") else row[4]
    facts["objective"] = value_of(line(update, "∇L"))
    for block in blocks(update, "p"):
        counts = re.search(r"The update holds N = (\d+) valid tokens? on W = (\d+) ranks?, at θ = (.*?)\.( |$)",
                           block[1])
        if counts:
            facts["N"], facts["W"] = counts.group(1), counts.group(2)
            facts["theta"] = value_of(counts.group(3))
    facts["local-means"] = value_of(line_containing(section("Averaging the local means"), "(1/W)·Σ Sᵣ/nᵣ"))
    for row in blocks(section("Weights"), "table")[0][2]:
        if row[0].isdigit():
            r = row[0]
            facts["share-local-means-" + r] = row[2]
            facts["share-objective-" + r] = row[3]
            facts["token-weight-local-means-" + r] = "undefined" if row[4] == "no token" else row[4]
            facts["token-weight-objective-" + r] = "undefined" if row[5] == "no token" else row[5]
    facts["compensated"] = value_of(line(section("Why W·Sᵣ/N compensates"), "the reducer averages"))
    control = section("Control")
    facts["control-local-means"] = value_of(line(control, "averaged local means"))
    facts["control-compensated"] = value_of(line(control, "W·Sᵣ/N"))
    facts["control-objective"] = value_of(line(control, "objective"))
    empty = section("A rank that holds no valid token")
    facts["empty-local-means"] = value_of(line(empty, "averaged local means"))
    facts["empty-compensated"] = value_of(line(empty, "(1/W)·Σ W·Sᵣ/N"))
    facts["empty-objective"] = value_of(line(empty, "objective"))
    rejected = re.search(r"rejected with (\w+)", " ".join(line(section("No valid token"), "the ").split()))
    facts["all-empty"] = rejected.group(1) if rejected else "accepted"
    return facts


def svg_texts(path):
    root = ElementTree.parse(path).getroot()
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def check_numbers(ctx):
    """Every demo on the page is the library's: its title, headings, paragraphs, algebra and tables equal
    `normcheck demo NAME --markdown`, the figures' labels equal `--svg`, and the derivation's marked numbers
    equal what `normcheck demo derivation` prints (on the built-in example: -3/2, -1, -2, 1/2 versus 1/4)."""
    page = ctx.open()
    problems = []
    try:
        for name in DEMOS:
            want = parse_markdown(ctx.cli("demo", name, "--markdown"))
            got = page.call(PAGE_DOCUMENT, name)
            if got is None:
                problems.append("the page has no article #%s" % name)
                continue
            if got["title"] != want["title"]:
                problems.append("%s: title %r, the command line's %r" % (name, got["title"], want["title"]))
            if [s["heading"] for s in got["sections"]] != [s["heading"] for s in want["sections"]]:
                problems.append("%s: headings differ from the command line's" % name)
            for w, g in zip(want["sections"], got["sections"]):
                for i, (wb, gb) in enumerate(zip(w["blocks"], g["blocks"])):
                    if wb != gb:
                        problems.append("%s, '%s', block %d:\n  command line %r\n  page         %r" % (
                            name, w["heading"], i + 1, wb, gb))
                if len(w["blocks"]) != len(g["blocks"]):
                    problems.append("%s, '%s': %d blocks, the command line has %d" % (
                        name, w["heading"], len(g["blocks"]), len(w["blocks"])))
        for name in ("derivation", "disguise"):
            svg = os.path.join(ctx.work, "cli-%s.svg" % name)
            ctx.cli("demo", name, "--svg", svg)
            got = page.call("(id) => [...document.querySelectorAll('#' + id + ' svg text')].map(t => t.textContent)",
                            name + "-figure")
            if got != svg_texts(svg):
                problems.append("%s figure: labels %r differ from normcheck demo %s --svg: %r" % (
                    name, got[:8], name, svg_texts(svg)[:8]))

        want = derivation_facts_from_cli(parse_markdown(ctx.cli("demo", "derivation", "--markdown")))
        marked = page.evaluate("""[...document.querySelectorAll('#derivation [data-fact]')].map(e =>
            [e.dataset.fact, e.hasAttribute('value') ? e.getAttribute('value') : null,
             e.textContent.replace(/ \\(≈ [^)]*\\)$/, '')])""")
        got = {}
        for fact, value, text in marked:
            got[fact] = text
            if value is not None and "…" not in text and value != text:
                problems.append("fact %s: value %r but shown %r" % (fact, value, text))
        for fact, value in sorted(want.items()):
            if got.get(fact) != value:
                problems.append("fact %s: the page shows %r, normcheck demo derivation %r" % (
                    fact, got.get(fact), value))
        if not ctx.partition:
            issue = {"objective": "-3/2", "local-means": "-1", "rank-mean-1": "-2", "share-local-means-0": "1/2",
                     "share-objective-0": "1/4", "compensated": "-3/2"}
            for fact, value in issue.items():
                if got.get(fact) != value:
                    problems.append("fact %s on the seed example [[0],[2,2,2]]: %r, expected %s" % (
                        fact, got.get(fact), value))
        print("numbers: %d demos compared block by block, %d marked facts, %d compared with the command line" % (
            len(DEMOS), len(got), len(want)))
        return problems
    finally:
        ctx.close(page)


# ---- the lab ----

def drive(page, command):
    """Runs one command through the page's controls, as a learner would: the field and button that type it,
    or the command field for anything else. Returns (status, lines), or ("not_run", []) when the lab added
    no transcript entry (after quit)."""
    before = page.evaluate("document.querySelectorAll('#lab-log .lab-entry').length")
    forms = [(r"set lr (\S+)", "lab-form-lr"), (r"set x (\S+)", "lab-form-x"), (r"predict (\S+)", "lab-form-predict"),
             (r"step ?(\S*)", "lab-form-step")]
    action = None
    if command in ("reset", "show", "help"):
        action = "document.getElementById('lab-%s').click()" % command
    else:
        for pattern, form in forms:
            match = re.fullmatch(pattern, command)
            if match:
                action = ("(() => { const f = document.getElementById(%s); f.elements.value.value = %s; "
                          "f.querySelector('button').click(); })()" % (json.dumps(form), json.dumps(match.group(1))))
                break
    if action is None:
        action = ("(() => { const f = document.getElementById('lab-form-command'); f.elements.value.value = %s; "
                  "f.querySelector('button').click(); })()" % json.dumps(command))
    page.evaluate(action)
    entry = last_entry(page)
    if entry is None or entry["count"] == before:
        return ("not_run", [])
    return (entry["status"], entry["lines"])


def start_over(page):
    page.evaluate("document.getElementById('lab-start-over').click()")


def check_lab(ctx):
    """The lesson through the page's controls: after reset, lr 0.1, x 2, one step shows 9/5 (1.8); after a
    fresh reset with lr 0.2, 8/5 (1.6); stepping before lr and x are set is refused with the command-line
    lab's own message. The transcript is a live region and the page states what the instrument lacks."""
    page = ctx.open()
    problems = []
    try:
        _, _, err = lab_runs.cli_lab(ctx.normcheck, ["step"])
        refusal = err[0].split(": ", 1)[1] if err else None
        got = drive(page, "step")
        if got != ("refused", [refusal]):
            problems.append("step before set shows %r, the command-line lab says %r" % (got, refusal))
        for command, expected in [("reset", None), ("set lr 0.1", None), ("set x 2", None),
                                  ("step", "x1 = 9/5 (≈ 1.8)"), ("reset", None), ("set lr 0.2", None),
                                  ("set x 2", None), ("step", "x1 = 8/5 (≈ 1.6)")]:
            status, lines = drive(page, command)
            if status != "done" or (expected and lines[:1] != [expected]):
                problems.append("%r shows %r %r, expected %r" % (command, status, lines, expected or "done"))
        log = page.evaluate("""(() => { const l = document.getElementById('lab-log');
            return {role: l.getAttribute('role'), live: l.getAttribute('aria-live'),
                    limits: document.getElementById('lab-limits').textContent}; })()""")
        if log["role"] != "log" or log["live"] != "polite":
            problems.append("the transcript is not a polite live region: %r" % log)
        data = json.loads(page.evaluate("document.getElementById('lab-data').textContent"))
        if data["limits"] not in log["limits"]:
            problems.append("the page does not state the instrument's limits (lab_limits())")
        for missing in ("no replicas", "no all-reduce", "no optimizer state", "no data pipeline"):
            if missing not in log["limits"]:
                problems.append("the limits do not say %r" % missing)
        print("lab: refusal %r; lesson steps 1.8 and 1.6 %s" % (got, "shown" if not problems else "not shown"))
        return problems
    finally:
        ctx.close(page)


def check_runs(ctx):
    """Every shared run (lab_runs.json) through the page's controls and through `normcheck lab` gives the
    outcomes the table states."""
    page = ctx.open()
    problems = []
    try:
        runs = lab_runs.load_runs(ctx.runs_path)
        banner = lab_runs.cli_banner(ctx.normcheck)
        for run in runs:
            label = "run '%s'" % run["name"]
            commands = lab_runs.commands_of(run)
            want = lab_runs.expected_outcomes(run)
            start_over(page)
            got = [drive(page, command) for command in commands]
            problems += lab_runs.diff_outcomes(label + " on the page", commands, want, got)
            problems += lab_runs.compare_cli(ctx.normcheck, banner, commands, want, label)
            if problems and ctx.first_problem_only:
                break
        print("runs: %d shared runs, %d commands, through the page's controls and the command line" % (
            len(runs), sum(len(r["commands"]) for r in runs)))
        return problems
    finally:
        ctx.close(page)


def check_differential(ctx):
    """A seeded random session of 400 commands (literals of every form and corner, malformed commands,
    refusals) through the page's lab core in the browser gives exactly the command-line lab's output."""
    page = ctx.open()
    try:
        commands = lab_runs.random_commands(seed=19, count=400)
        raw = page.evaluate("(%s)(JSON.parse(document.getElementById('lab-data').textContent), %s)[0]" % (
            lab_runs.CORE_RUNNER.strip(), json.dumps([commands])), timeout=60)
        outcomes = lab_runs.as_outcomes(raw)
        banner = lab_runs.cli_banner(ctx.normcheck)
        problems = lab_runs.compare_cli(ctx.normcheck, banner, commands, outcomes,
                                        "random session (seed 19), the page's lab core against the command line")
        statuses = {}
        for status, _ in outcomes:
            statuses[status] = statuses.get(status, 0) + 1
        print("differential: %d random commands, statuses %r" % (len(commands), statuses))
        return problems
    finally:
        ctx.close(page)


CHECKS = {"static": check_static, "load": check_load, "screenshot": check_screenshot, "figures": check_figures,
          "narrow": check_narrow, "keyboard": check_keyboard, "numbers": check_numbers, "lab": check_lab,
          "runs": check_runs, "differential": check_differential}


# ---------------------------------------------------------------------------------------------
# Broken pages: each mutation must make its check fail.

def replace_once(old, new):
    def mutate(text):
        if old not in text:
            raise AssertionError("the mutation finds nothing to break: %r is not in the page" % old)
        return text.replace(old, new, 1)
    return mutate


def regex_once(pattern, new):
    def mutate(text):
        changed, count = re.subn(pattern, new, text, count=1)
        if count == 0:
            raise AssertionError("the mutation finds nothing to break: no match for %r" % pattern)
        return changed
    return mutate


CSP = regex_once(r'<meta http-equiv="Content-Security-Policy"[^>]*>\n', "")
MUTATIONS = [
    ("static", "an external link", replace_once("</footer>", '<a href="https://example.invalid/">x</a></footer>')),
    ("load", "a script that throws", replace_once("</body>", "<script>undefinedFunction();</script></body>")),
    ("load", "a console error", replace_once("</body>", "<script>console.error('broken');</script></body>")),
    ("load", "a request for a missing image",
     lambda t: replace_once("</footer>", '<img src="missing.png" alt=""></footer>')(CSP(t))),
    # page.html is the page under test's name in the work folder, so this request succeeds quietly.
    ("load", "a request that succeeds",
     lambda t: replace_once("</footer>", '<iframe title="x" src="page.html"></iframe></footer>')(CSP(t))),
    ("screenshot", "nothing drawn", replace_once("</style>", "body { visibility: hidden; }</style>")),
    ("figures", "the hatching gone",
     replace_once('figure svg rect[fill="#c0392b"] { fill: url(#hatch-mistaken); }', "")),
    ("figures", "no text alternative",
     regex_once(r'(<svg) role="img" aria-labelledby="derivation-figure-title derivation-figure-desc"', r"\1")),
    ("figures", "a series not drawn", replace_once("</style>", 'rect[fill="#1f6f8b"] { display: none; }</style>')),
    ("narrow", "a wide element", replace_once("</header>", '<div style="width: 700px">wide</div></header>')),
    ("narrow", "a control too wide", replace_once("</style>", "#lab-command { min-width: 500px; }</style>")),
    ("keyboard", "a button that is not a button", replace_once('<button type="button" id="lab-reset">Reset</button>',
                                                               '<span id="lab-reset">Reset</span>')),
    ("keyboard", "focus not shown",
     replace_once("</style>", "*:focus-visible { outline: none !important; box-shadow: none !important; }</style>")),
    ("keyboard", "no skip link", regex_once(r'<a class="skip" href="#lab">[^<]*</a>\n', "")),
    ("numbers", "a number in a table", replace_once("<td>-6</td>", "<td>-5</td>")),
    ("numbers", "a marked number", replace_once('data-fact="objective" value="-3/2">-3/2',
                                                'data-fact="objective" value="-1/2">-1/2')),
    ("numbers", "a figure label", regex_once(r'(<svg role="img"[^>]*derivation-figure[\s\S]*?>)1/4<', r"\g<1>1/3<")),
    ("lab", "another refusal text", replace_once('"refused: cannot step before lr (set lr VALUE) and x',
                                                 '"refused: cannot step yet: lr (set lr VALUE) and x')),
    ("lab", "decimals read inexactly", replace_once("exponentValue(exponent) - fraction.length",
                                                    "exponentValue(exponent) - fraction.length - 1")),
    ("lab", "no live region", replace_once('role="log" aria-live="polite"', 'role="log" aria-live="off"')),
    ("runs", "hexadecimal floats misread", replace_once("- 4 * fraction.length", "- 3 * fraction.length")),
    ("runs", "another approximation", regex_once(r'"significant_digits": \d+', '"significant_digits": 5')),
    ("differential", "long literals quoted whole", replace_once("if (bytes.length <= literal.quote_limit) return text;",
                                                                "return text;")),
    ("differential", "rounding toward zero", replace_once("(2n * num + den) / (2n * den)", "num / den")),
]


def self_test(ctx, page_text):
    problems = []
    for check, what, mutate in MUTATIONS:
        broken = os.path.join(ctx.work, "broken-%s.html" % re.sub(r"\W+", "-", what))
        with open(broken, "w", encoding="utf-8") as f:
            f.write(mutate(page_text))
        broken_ctx = Context(ctx.browser, ctx.normcheck, broken, ctx.work, ctx.partition, ctx.runs_path)
        broken_ctx._cli = ctx._cli
        broken_ctx.first_problem_only = True
        begun = time.monotonic()
        try:
            found = CHECKS[check](broken_ctx)
        except (AssertionError, cdp.ScriptError) as e:
            found = ["raised: %s" % e]
        if found:
            print("self-test: %s catches %s (%.1f s): %s" % (check, what, time.monotonic() - begun,
                                                             found[0].splitlines()[0][:120]))
        else:
            problems.append("the %s check passes a page with %s" % (check, what))
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--normcheck", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--checks", default="")
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("--runs")
    parser.add_argument("--partition")
    parser.add_argument("--chromium", default=cdp.CHROMIUM)
    parser.add_argument("--time-limit", type=float, default=90)
    args = parser.parse_args()
    if not os.path.exists(args.chromium):
        print("%s is not installed (Debian package chromium): skipped" % args.chromium)
        return SKIP
    os.makedirs(args.work, exist_ok=True)
    page_path = os.path.join(args.work, "page%s.html" % ("-partition" if args.partition else ""))
    command = ([args.normcheck, "demo", "--html", page_path]
               + (["--partition", args.partition] if args.partition else []))
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        print("%s failed with %d:\n%s%s" % (" ".join(command), result.returncode, result.stdout, result.stderr))
        return 1
    started = time.monotonic()
    problems = []
    with cdp.Browser(args.chromium, deadline_seconds=args.time_limit) as browser:
        ctx = Context(browser, args.normcheck, page_path, args.work, args.partition, args.runs)
        try:
            for name in [c for c in args.checks.split(",") if c]:
                begun = time.monotonic()
                problems += ["%s: %s" % (name, p) for p in CHECKS[name](ctx)]
                print("  (%s: %.1f s)" % (name, time.monotonic() - begun))
            if args.self_test:
                with open(page_path, encoding="utf-8") as f:
                    problems += self_test(ctx, f.read())
        except Exception:  # a check that cannot run is a failure, with the browser's last words
            traceback.print_exc()
            print(browser.log_tail())
            return 1
    for problem in problems:
        print("PROBLEM " + problem)
    print("%s in %.1f s" % ("failed" if problems else "passed", time.monotonic() - started))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
