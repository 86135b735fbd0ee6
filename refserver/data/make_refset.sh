#!/usr/bin/env bash
# make_refset.sh builds the asrprof reference set: 16 kHz mono 16-bit WAV
# files and refserver/data/refset/manifest.jsonl ({"id","audio","text","lang"}),
# from Debian packages only:
#
#   - the five LibriVox clips and their transcripts in pocketsphinx-testdata;
#   - sox variants of each (speed, tempo, gain, noise, telephone band, reverb);
#   - the sentences of sentences.txt spoken by espeak-ng in three voices.
#
# Deterministic (sox -R, fixed voices and rates) and idempotent: a stamp of
# this script, the sentences and the tool versions is kept next to the
# manifest, and a run with a matching stamp only prints the summary.
#
# Needs: apt-get install -y pocketsphinx-testdata sox espeak-ng
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${REFSET_DIR:-$here/refset}"
librivox="${LIBRIVOX_DIR:-/usr/share/pocketsphinx/test/data/librivox}"
sentences="$here/sentences.txt"

die() { echo "make_refset: $*" >&2; exit 1; }

for tool in sox soxi espeak-ng sha256sum awk; do
	command -v "$tool" >/dev/null || die "$tool not found (apt-get install -y sox espeak-ng)"
done
[ -f "$librivox/transcription" ] || die "$librivox/transcription not found (apt-get install -y pocketsphinx-testdata)"
[ -f "$sentences" ] || die "$sentences not found"

summary() {
	local n secs
	n=$(grep -c . "$out/manifest.jsonl")
	secs=$(cd "$out" && soxi -D audio/*.wav | awk '{s += $1} END {printf "%.1f", s}')
	echo "refset: $n utterances, $secs s of audio in $out/manifest.jsonl"
}

stamp=$( {
	cat "$0" "$sentences" "$librivox/transcription"
	sox --version 2>&1 | head -n1
	espeak-ng --version 2>&1 | head -n1
} | sha256sum | cut -d' ' -f1)

if [ -f "$out/manifest.jsonl" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
	summary
	exit 0
fi

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/audio" "$tmp/work"
trap 'rm -rf "$tmp"' EXIT

manifest="$tmp/manifest.jsonl"
: >"$manifest"

# json_escape prints its argument as a JSON string body.
json_escape() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	printf '%s' "$s"
}

add() { # add ID TEXT: the audio is audio/ID.wav
	printf '{"id":"%s","audio":"audio/%s.wav","text":"%s","lang":"en"}\n' \
		"$1" "$1" "$(json_escape "$2")" >>"$manifest"
}

# to16k IN OUT [EFFECT...]: convert to the set's format, applying effects.
to16k() {
	local in=$1 outf=$2
	shift 2
	sox -R -V1 "$in" -r 16000 -c 1 -b 16 -e signed-integer "$outf" "$@"
}

# ---- LibriVox clips and their sox variants
# transcription lines: <s> words </s> (utterance-id)
while IFS= read -r line; do
	[ -n "$line" ] || continue
	utt=${line##*(}
	utt=${utt%)*}
	text=${line%(*}
	text=${text#*<s>}
	text=${text%</s>*}
	text=$(echo "$text" | awk '{$1 = $1; print}')
	src="$librivox/$utt.wav"
	[ -f "$src" ] || die "$src listed in the transcription but missing"
	base="lv-${utt##*-}"

	to16k "$src" "$tmp/audio/$base.wav"
	add "$base" "$text"

	dur=$(soxi -D "$src")
	sox -R -V1 -n -r 16000 -c 1 -b 16 "$tmp/work/white.wav" synth "$dur" whitenoise vol 0.02
	sox -R -V1 -n -r 16000 -c 1 -b 16 "$tmp/work/pink.wav" synth "$dur" pinknoise vol 0.06

	variant() { # variant NAME EFFECT...
		local name=$1
		shift
		to16k "$src" "$tmp/audio/$base-$name.wav" "$@"
		add "$base-$name" "$text"
	}
	variant speed090 speed 0.9
	variant speed110 speed 1.1
	variant tempo085 tempo -s 0.85
	variant tempo120 tempo -s 1.2
	variant gain-12db gain -12
	variant gain+6db gain -l 6
	variant tel sinc 300-3400 rate 8000
	variant reverb reverb 40 50 60
	for noise in white pink; do
		sox -R -V1 -m -v 1 "$tmp/audio/$base.wav" -v 1 "$tmp/work/$noise.wav" \
			-r 16000 -c 1 -b 16 -e signed-integer "$tmp/audio/$base-${noise}noise.wav"
		add "$base-${noise}noise" "$text"
	done
done <"$librivox/transcription"

# ---- espeak-ng: every sentence in three voices
voices=("en-us:160" "en-us+f3:140" "en-gb-x-rp+m3:180")
i=0
while IFS= read -r sentence; do
	case "$sentence" in '' | '#'*) continue ;; esac
	i=$((i + 1))
	for vs in "${voices[@]}"; do
		voice=${vs%%:*}
		rate=${vs##*:}
		vid=$(echo "$voice" | tr -c 'a-z0-9\n' '-')
		id=$(printf 'es-%03d-%s-%s' "$i" "$vid" "$rate")
		espeak-ng -v "$voice" -s "$rate" -w "$tmp/work/es.wav" -- "$sentence"
		to16k "$tmp/work/es.wav" "$tmp/audio/$id.wav" pad 0.25 0.25
		add "$id" "$sentence"
	done
done <"$sentences"

rm -rf "$tmp/work"
echo "$stamp" >"$tmp/.stamp"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
summary
