#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Every relative markdown link in README.md, docs/*.md and bench/**/*.md
# resolves to a file or folder of the tree (anchors and URLs are not checked).
#   bench/check_links.sh            (from anywhere in the repository; CPU only)
# Prints each broken link as FILE: TARGET; exit status 1 if there is one.
cd "$(dirname "$0")/.." || exit 2
python3 - "$@" <<'PY'
import glob, os, re, sys
files = ["README.md"] + sorted(glob.glob("docs/*.md")) + sorted(glob.glob("bench/**/*.md", recursive=True))
# [text](target) and ![alt](target); drop fenced code blocks and inline code first
link = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
bad = 0
for f in files:
    text = open(f, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    for t in link.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", t) or t.startswith("#"):
            continue
        path = t.split("#", 1)[0]
        if not path:
            continue
        target = os.path.normpath(os.path.join(os.path.dirname(f), path))
        if not os.path.exists(target):
            print("%s: %s" % (f, t))
            bad += 1
print("check_links: %d files, %d broken links" % (len(files), bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
