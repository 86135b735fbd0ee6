package proctree

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestGroupMembers(t *testing.T) {
	dir := t.TempDir()
	write := func(pid int, state string, pgrp int) {
		os.MkdirAll(filepath.Join(dir, strconv.Itoa(pid)), 0o755)
		os.WriteFile(filepath.Join(dir, strconv.Itoa(pid), "stat"), fmt.Appendf(nil, "%d (x) %s 1 %d %d 0 -1 4194560 0 0 0 0 1 2 0 0 20 0 1 0 1 1 1", pid, state, pgrp, pgrp), 0o644)
	}
	write(10, "S", 10)
	write(11, "R", 10)
	write(12, "Z", 10) // a zombie nobody reaped does not count
	write(13, "S", 99)
	os.MkdirAll(filepath.Join(dir, "self"), 0o755)
	if got := fmt.Sprint(GroupMembers(dir, 10)); got != "[10 11]" {
		t.Errorf("members %s", got)
	}
}
