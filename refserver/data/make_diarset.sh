#!/usr/bin/env bash
# make_diarset.sh builds the asrprof diarization set from the reference set
# (make_refset.sh): each sample is two or three refset clips of different
# voices joined end to end with sox, and its reference is the
# MOSS-Transcribe-Diarize markup
#
#   [start][S01]words of the first clip[end][start][S02]words of the next[end]
#
# in refserver/data/diarset/manifest.jsonl ({"id","audio","text","lang"}).
#
# Turn times come from the clips' lengths (soxi): an espeak-ng clip of the
# refset carries 0.25 s of padding at each end (make_refset.sh pads it), so
# its turn is the clip less those 0.25 s; a LibriVox clip's turn is the
# whole clip. Speakers are numbered by first appearance; the same voice is
# the same speaker within a sample.
#
# Deterministic (sox -R) and idempotent: a stamp of this script and of the
# refset's manifest is kept next to the manifest.
#
# Needs: the refset (refserver/data/make_refset.sh), sox.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
refset="${REFSET_DIR:-$here/refset}"
out="${DIARSET_DIR:-$here/diarset}"

die() { echo "make_diarset: $*" >&2; exit 1; }

for tool in sox soxi sha256sum awk; do
	command -v "$tool" >/dev/null || die "$tool not found (apt-get install -y sox)"
done
[ -f "$refset/manifest.jsonl" ] || die "$refset/manifest.jsonl not found (run refserver/data/make_refset.sh first)"

# The samples: ID, then the refset clips in speaking order, each as
# CLIP=SPEAKER.
samples=(
	"dz-01 es-001-en-us-160=S01 es-002-en-us-f3-140=S02"
	"dz-02 es-003-en-gb-x-rp-m3-180=S01 es-004-en-us-f3-140=S02"
	"dz-03 es-005-en-us-160=S01 es-006-en-gb-x-rp-m3-180=S02 es-007-en-us-160=S01"
	"dz-04 lv-0870=S01 es-008-en-us-f3-140=S02"
)

summary() {
	local n secs
	n=$(grep -c . "$out/manifest.jsonl")
	secs=$(cd "$out" && soxi -D audio/*.wav | awk '{s += $1} END {printf "%.1f", s}')
	echo "diarset: $n multi-speaker samples, $secs s of audio in $out/manifest.jsonl"
}

stamp=$( {
	cat "$0" "$refset/manifest.jsonl"
	sox --version 2>&1 | head -n1
} | sha256sum | cut -d' ' -f1)

if [ -f "$out/manifest.jsonl" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
	summary
	exit 0
fi

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/audio"
trap 'rm -rf "$tmp"' EXIT

# text ID: the refset transcript of clip ID (manifest lines are one JSON
# object each, the text has no double quote).
text() {
	local line
	line=$(grep -F "\"id\":\"$1\"," "$refset/manifest.jsonl") || die "clip $1 is not in $refset/manifest.jsonl"
	line=${line#*\"text\":\"}
	printf '%s' "${line%%\"*}"
}

for s in "${samples[@]}"; do
	read -r id clips <<<"$s"
	files=()
	markup=""
	at=0
	for c in $clips; do
		clip=${c%=*}
		spk=${c#*=}
		f="$refset/audio/$clip.wav"
		[ -f "$f" ] || die "$f not found"
		files+=("$f")
		dur=$(soxi -D "$f")
		pad=0
		case "$clip" in es-*) pad=0.25 ;; esac
		markup+=$(awk -v at="$at" -v d="$dur" -v p="$pad" -v spk="$spk" -v t="$(text "$clip")" \
			'BEGIN { printf "[%.2f][%s]%s[%.2f]", at + p, spk, t, at + d - p }')
		at=$(awk -v at="$at" -v d="$dur" 'BEGIN { printf "%.6f", at + d }')
	done
	sox -R -V1 "${files[@]}" "$tmp/audio/$id.wav"
	printf '{"id":"%s","audio":"audio/%s.wav","text":"%s","lang":"en"}\n' "$id" "$id" "$markup" >>"$tmp/manifest.jsonl"
done

echo "$stamp" >"$tmp/.stamp"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
summary
