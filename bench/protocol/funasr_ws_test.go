package protocol

import (
	"testing"

	"github.com/coder/websocket"
)

// TestFunASRPartialReplacesSentencesLock feeds one session's messages to
// the dialect and checks the transcript after each.
func TestFunASRPartialReplacesSentencesLock(t *testing.T) {
	steps := []struct {
		msg                     string
		text                    string
		partial, final, hasText bool
		locked                  int
	}{
		{`{"event":"started"}`, "", false, false, false, 0},
		{`{"sentences":[],"partial":"he","is_final":false}`, "he", true, false, true, 0},
		// A revised partial replaces the previous one, never appends.
		{`{"sentences":[],"partial":"he wore","is_final":false}`, "he wore", true, false, true, 0},
		{`{"sentences":[],"partial":"he was not","is_final":false}`, "he was not", true, false, true, 0},
		// The partial is locked into a sentence; the new partial is empty.
		{`{"sentences":[{"text":"he was not","start":0,"end":900}],"partial":"","is_final":false}`, "he was not", true, false, true, 1},
		{`{"sentences":[{"text":"he was not","start":0,"end":900}],"partial":"an ill","is_final":false}`, "he was not an ill", true, false, true, 0},
		// A shorter sentence list does not unlock a sentence.
		{`{"sentences":[],"partial":"an ill disposed","is_final":false}`, "he was not an ill disposed", true, false, true, 0},
		{`{"event":"language_set","language":"en"}`, "he was not an ill disposed", false, false, false, 0},
		// The final message keeps its partial in the transcript.
		{`{"sentences":[{"text":"he was not","start":0,"end":900},{"text":"an ill disposed","start":1000,"end":2000}],"partial":"young man","is_final":true}`,
			"he was not an ill disposed young man", false, true, true, 1},
	}
	f := &funasr{}
	for i, st := range steps {
		m, err := f.handle(websocket.MessageText, []byte(st.msg), i == len(steps)-1)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := f.text(); got != st.text {
			t.Errorf("step %d: text %q, want %q", i, got, st.text)
		}
		if m.partial != st.partial || m.final != st.final || m.text != st.hasText || m.locked != st.locked {
			t.Errorf("step %d: got partial %v final %v text %v locked %d, want %v %v %v %d",
				i, m.partial, m.final, m.text, m.locked, st.partial, st.final, st.hasText, st.locked)
		}
	}
}

func TestFunASRErrors(t *testing.T) {
	for _, tt := range []struct {
		msg   string
		typ   websocket.MessageType
		isSrv bool
	}{
		{`{"event":"error","error":"model busy"}`, websocket.MessageText, true},
		{`{"event":"stopped"}`, websocket.MessageText, false},
		{`not json`, websocket.MessageText, false},
		{`{}`, websocket.MessageBinary, false},
	} {
		_, err := (&funasr{}).handle(tt.typ, []byte(tt.msg), true)
		_, srv := err.(*serverError)
		_, bad := err.(*malformedError)
		if (tt.isSrv && !srv) || (!tt.isSrv && !bad) {
			t.Errorf("%s: error %v (%T)", tt.msg, err, err)
		}
	}
}
