package table

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/need"
)

// openPTY opens a pseudo-terminal and returns its terminal side.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		need.Skip(t, "no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		need.Skip(t, "unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		need.Skip(t, "ptsname: %v", err)
	}
	tty, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		need.Skip(t, "opening the terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	go func() { // drain what the tests write
		b := make([]byte, 4096)
		for {
			if _, err := ptmx.Read(b); err != nil {
				return
			}
		}
	}()
	return tty
}

// A terminal's width is its window size, 120 when it has none; text
// rendered to it fits that width.
func TestTableTerminalWidth(t *testing.T) {
	tty := openPTY(t)
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 0}); err != nil {
		need.Skip(t, "setting the window size: %v", err)
	}
	if w := TerminalWidth(tty); w != DefaultWidth {
		t.Errorf("a terminal of unknown size: width %d, want %d", w, DefaultWidth)
	}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 90}); err != nil {
		t.Fatal(err)
	}
	if w := TerminalWidth(tty); w != 90 {
		t.Errorf("a 90-column terminal: width %d", w)
	}
	var want bytes.Buffer
	RenderWidth(&want, "text", 90, diagnosis())
	if strings.Count(want.String(), "\n") <= 6 {
		t.Errorf("at 90 columns the diagnosis did not wrap:\n%s", want.String())
	}
	if err := Render(tty, "text", diagnosis()); err != nil {
		t.Error(err)
	}
}
