#!/usr/bin/env bash
# Download the public datasets the notebooks, benchmarks and data tests read, into DEST
# (default: ../shared/data beside this clone, where they look), then check every file
# against data/SHA256SUMS. Needs curl, unzip, git and sha256sum; about 30 MB.
#   bash data/fetch.sh            # -> ../shared/data
#   bash data/fetch.sh /some/dir  # elsewhere (then link it to ../shared/data)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:-$here/../../shared/data}"
mkdir -p "$dest" && cd "$dest"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

# BEIR SciFact (claims CC BY 4.0, abstracts ODC-By 1.0)
curl -fL --retry 3 -o "$tmp/scifact.zip" https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip
unzip -q -o "$tmp/scifact.zip" -d "$tmp" && mkdir -p beir_scifact/qrels
cp "$tmp/scifact/corpus.jsonl" "$tmp/scifact/queries.jsonl" beir_scifact/
cp "$tmp"/scifact/qrels/*.tsv beir_scifact/qrels/
curl -fL --retry 3 -o beir_scifact/LICENSE-SciFact.md https://raw.githubusercontent.com/allenai/scifact/master/LICENSE.md

# Python PEPs: the public-domain / CC0 ones listed in data/SHA256SUMS
git clone -q --depth 1 https://github.com/python/peps "$tmp/peps"
mkdir -p python_peps/peps
grep -o 'python_peps/peps/pep-[0-9]*\.rst' "$here/SHA256SUMS" | while read -r f; do
  cp "$tmp/peps/peps/$(basename "$f")" "$f"
done

# Topical-Chat test_freq.json (CDLA-Sharing-1.0)
mkdir -p topical_chat
curl -fL --retry 3 -o topical_chat/test_freq.json https://raw.githubusercontent.com/alexa/Topical-Chat/master/conversations/test_freq.json
curl -fL --retry 3 -o topical_chat/DATALICENSE-CDLA-Sharing-1.0.txt https://raw.githubusercontent.com/alexa/Topical-Chat/master/DATALICENSE

# tinyshakespeare (public domain text)
mkdir -p tinyshakespeare
curl -fL --retry 3 -o tinyshakespeare/input.txt https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt

# A PEP edited upstream since our snapshot shows as FAILED here: the tests use the PEPs as
# real text, not byte for byte, so such a file still serves; the others must match.
sha256sum -c --quiet "$here/SHA256SUMS" && echo "all files match data/SHA256SUMS"
