"""Diarization mode of the asrprof reference server (--diarize MANIFEST).

The server answers every transcription in MOSS-Transcribe-Diarize's markup,

    [start][S01]words[end][start][S02]words[end]

with the words and their times from PocketSphinx's own segmentation of the
utterance (Decoder.seg(): word, start and end frame, 100 frames/s), and the
speaker of each word from the dataset: the manifest's reference markup
gives the speaker turns of each audio file, and the server finds the
upload's turns by the file's SHA-256. PocketSphinx has no speaker model, so
the speaker labels are the dataset's (an oracle): what the scores measure
is the recognizer's words and word times against the reference turns.

A word goes to the turn it overlaps most (the nearest turn when it
overlaps none); consecutive words of one speaker form one segment, from
the first word's start to the last word's end. An upload whose audio is
not in the manifest is one speaker, S01.

Standard library only.
"""

import hashlib
import json
import os
import re

_BRACKET = re.compile(r"\[([^\]]+)\]")
_TIME = re.compile(r"^\d+(?:\.\d+)?$")
_SPEAKER = re.compile(r"^S0*(\d+)$", re.IGNORECASE)


def parse_turns(text):
    """The timed speaker turns of a markup, [(start, end, speaker)], read
    the way the scorer reads them (a time opens a turn, the next closes it;
    the speaker is the last tag between, else the previous turn's)."""
    toks = []
    for m in _BRACKET.finditer(text or ""):
        raw = m.group(1).strip()
        if _TIME.match(raw):
            toks.append(("time", float(raw)))
        else:
            sm = _SPEAKER.match(raw)
            if sm:
                toks.append(("spk", "S%02d" % int(sm.group(1))))
    turns, last, i = [], None, 0
    while i < len(toks):
        if toks[i][0] != "time":
            i += 1
            continue
        start, j, spk = toks[i][1], i + 1, None
        while j < len(toks) and toks[j][0] != "time":
            spk = toks[j][1]
            j += 1
        if j >= len(toks):
            break
        end = toks[j][1]
        spk = spk or last
        if spk is not None and end > start:
            turns.append((start, end, spk))
            last = spk
        i = j + 1
    return turns


def load_manifest(path):
    """{sha256 of the audio file: turns} from a JSONL manifest whose text is
    the reference markup; ValueError names the file and line."""
    table = {}
    base = os.path.dirname(os.path.abspath(path))
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise ValueError("--diarize %s: %s" % (path, e.strerror))
    with f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
                audio, text = e["audio"], e["text"]
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError("--diarize %s line %d: want a JSON object with audio and text (%s)"
                                 % (path, n, err))
            turns = parse_turns(text)
            if not turns:
                raise ValueError("--diarize %s line %d: text has no timed speaker turn "
                                 "([start][S01]words[end])" % (path, n))
            p = audio if os.path.isabs(audio) else os.path.join(base, audio)
            try:
                with open(p, "rb") as af:
                    table[hashlib.sha256(af.read()).hexdigest()] = turns
            except OSError as err:
                raise ValueError("--diarize %s line %d: audio %s: %s" % (path, n, p, err.strerror))
    if not table:
        raise ValueError("--diarize %s: no entries" % path)
    return table


def words_of(decoder, frame_rate=100.0):
    """[(word, start_s, end_s)] of a finished utterance, fillers dropped and
    alternate pronunciations (word(2)) named by their word.

    Debian's PocketSphinx (python3-pocketsphinx 0.1.15) numbers frames on
    from earlier utterances of the same decoder; an utterance's first
    segment (the silence <s>) starts at its frame 0, so times are counted
    from there."""
    segs = list(decoder.seg())
    if not segs:
        return []
    base = segs[0].start_frame
    out = []
    for seg in segs:
        w = seg.word
        if not w or w[0] in "<[+":
            continue
        w = re.sub(r"\(\d+\)$", "", w)
        out.append((w, (seg.start_frame - base) / frame_rate,
                    (seg.end_frame + 1 - base) / frame_rate))
    return out


def _speaker(turns, start, end):
    best, best_overlap = None, 0.0
    for s, e, spk in turns:
        ov = min(e, end) - max(s, start)
        if ov > best_overlap:
            best, best_overlap = spk, ov
    if best is not None:
        return best
    mid = (start + end) / 2
    return min(turns, key=lambda t: min(abs(t[0] - mid), abs(t[1] - mid)))[2]


def segments(words, turns):
    """The answer's segments: [{"start", "end", "speaker", "text"}]."""
    segs = []
    for w, s, e in words:
        spk = _speaker(turns, s, e) if turns else "S01"
        if segs and segs[-1]["speaker"] == spk:
            segs[-1]["end"] = e
            segs[-1]["text"] += " " + w
        else:
            segs.append({"start": s, "end": e, "speaker": spk, "text": w})
    return segs


def markup(segs):
    """The segments in MOSS-Transcribe-Diarize's markup."""
    return "".join("[%.2f][%s]%s[%.2f]" % (s["start"], s["speaker"], s["text"], s["end"])
                   for s in segs)
