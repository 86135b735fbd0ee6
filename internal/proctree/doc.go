// Package proctree finds a target's processes and threads in /proc: the
// process tree under a pid (Descendants), a process's threads (Threads),
// a thread's name (Comm), and the process that listens on a TCP port
// (FindListener).
//
// The parse functions (ParseStat, ParseListenInodes, ParseSocketInode,
// DescendantsOf) are pure and take the text of a /proc file; the other
// functions read /proc and call them.
//
// Permissions: reading another user's /proc/PID/fd needs root or
// CAP_SYS_PTRACE (FindListener); the rest is readable by anyone.
// Cost: Descendants reads /proc/*/stat once per call, about 1 ms for a
// few hundred processes.
package proctree
