package proctree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// ErrStopFailed: processes of the group survived SIGKILL.
var ErrStopFailed = errors.New("processes survived the stop")

// StopGroup ends the process group that pid leads: SIGTERM to the group
// (and to descendants that left it with setsid), then SIGKILL after grace,
// then it waits until none of them is left (zombies not counted). exited
// says whether the leader has exited (its parent reaped it or will);
// ErrStopFailed lists the pids that survived.
func StopGroup(ctx context.Context, pid int, grace time.Duration, exited func() bool) error {
	// Descendants that called setsid are not in the group; remember them
	// while the tree is still connected.
	extra := []int{}
	if !exited() {
		extra = Descendants(pid)
	}
	signal := func(sig syscall.Signal) {
		_ = syscall.Kill(-pid, sig)
		for _, p := range extra {
			_ = syscall.Kill(p, sig)
		}
	}
	left := func() []int {
		pids := GroupMembers("/proc", pid)
		for _, p := range extra {
			if _, ok := LiveStat("/proc", p); ok && !slices.Contains(pids, p) {
				pids = append(pids, p)
			}
		}
		if !exited() && !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
		sort.Ints(pids)
		return pids
	}
	if len(left()) == 0 {
		return nil
	}
	signal(syscall.SIGTERM)
	if waitEmpty(ctx, grace, left) {
		return nil
	}
	signal(syscall.SIGKILL)
	if waitEmpty(context.WithoutCancel(ctx), 10*time.Second, left) {
		return nil
	}
	return fmt.Errorf("%w: pids %v of group %d still run after SIGKILL", ErrStopFailed, left(), pid)
}

// waitEmpty polls left until it is empty (true) or d passes or ctx ends.
func waitEmpty(ctx context.Context, d time.Duration, left func() []int) bool {
	deadline := time.Now().Add(d)
	for {
		if len(left()) == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LiveStat is the stat of process pid under procDir, and whether it
// exists and is not a zombie.
func LiveStat(procDir string, pid int) (Stat, bool) {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, false
	}
	st, err := ParseStat(string(b))
	return st, err == nil && st.State != 'Z' && st.State != 'X'
}

// GroupMembers lists the live (non-zombie) processes under procDir whose
// process group is pgid.
func GroupMembers(procDir string, pgid int) []int {
	var out []int
	for _, pid := range pids(procDir) {
		if st, ok := LiveStat(procDir, pid); ok && st.PGRP == pgid {
			out = append(out, pid)
		}
	}
	return out
}
