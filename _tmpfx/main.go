package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/asrprof/asrprof/analysis/fixture"
)

func main() {
	n, _ := strconv.Atoi(os.Args[2])
	tr, err := fixture.Write(os.Args[1], fixture.Config{
		Levels:          []fixture.Level{{Concurrency: 1, SchedUtil: 0.2}, {Concurrency: 8, SchedUtil: 0.8, Stages: fixture.Stages{Build: fixture.Fixed(5 * time.Millisecond), QueuedToSched: fixture.Dist{Mean: 40 * time.Millisecond, Spread: 30 * time.Millisecond}, DecodeTail: fixture.Dist{Mean: 50 * time.Millisecond, Spread: 40 * time.Millisecond}}}},
		Warmup: true, RequestsPerPass: n, ExtraSpans: 4, GPU: true, Sched: true, FailEvery: 50,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(tr.Requests, tr.Spans)
}
