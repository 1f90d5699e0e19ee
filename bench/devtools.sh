#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# build/devtools: this machine's zstd and sfdisk with the libraries they
# need, for the GPU machine, which has neither (the md fixtures are .zst;
# the matrix makes its partitions with sfdisk). Carry build/devtools with
# the call and put build/devtools/bin first on PATH there. Each tool runs
# through a wrapper that sets LD_LIBRARY_PATH for it alone, so the copied
# libraries (libz, liblzma, ...) never replace the machine's own in Python
# or torch.
set -euo pipefail
D=${1:-build/devtools}
mkdir -p "$D/bin" "$D/lib" "$D/libexec"
for t in zstd sfdisk; do
	b=$(command -v "$t" || true)
	[ -n "$b" ] || { echo "devtools: no $t here (apt-get install zstd fdisk)" >&2; exit 1; }
	cp -L "$b" "$D/libexec/$t"
	ldd "$b" | awk '/=>/ { print $3 }' | grep -v -e 'libc\.so' -e 'ld-linux' | xargs -r -I{} cp -L {} "$D/lib/"
	printf '#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")/..\nLD_LIBRARY_PATH="$d/lib" exec "$d/libexec/%s" "$@"\n' "$t" >"$D/bin/$t"
	chmod +x "$D/bin/$t"
done
"$D/bin/zstd" --version >/dev/null && "$D/bin/sfdisk" --version >/dev/null && echo "devtools: $D ($(du -sh "$D" | cut -f1))"
