package export

import (
	"container/heap"
	"sort"
)

// interval is a half-open time span [start, end) in unix ns.
type interval struct{ start, end int64 }

// assignSlots gives each interval the lowest-numbered slot that is free at
// its start, where a slot is free once the intervals already in it have
// ended (an interval may start exactly when the previous one ended).
// Intervals are taken in start order (then end order, then index), so the
// result does not depend on the input order of equal intervals. It returns
// each interval's slot and the number of slots used. Intervals with
// end < start count as empty.
func assignSlots(ivs []interval) (slot []int, n int) {
	order := make([]int, len(ivs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := ivs[order[a]], ivs[order[b]]
		if x.start != y.start {
			return x.start < y.start
		}
		return x.end < y.end
	})
	slot = make([]int, len(ivs))
	var free intHeap  // slots free now
	var busy busyHeap // slots in use, by end time
	for _, i := range order {
		iv := ivs[i]
		end := max(iv.end, iv.start)
		for busy.Len() > 0 && busy[0].end <= iv.start {
			b := heap.Pop(&busy).(busySlot)
			heap.Push(&free, b.slot)
		}
		var s int
		if free.Len() > 0 {
			s = heap.Pop(&free).(int)
		} else {
			s = n
			n++
		}
		slot[i] = s
		heap.Push(&busy, busySlot{end: end, slot: s})
	}
	return slot, n
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type busySlot struct {
	end  int64
	slot int
}

type busyHeap []busySlot

func (h busyHeap) Len() int { return len(h) }
func (h busyHeap) Less(i, j int) bool {
	if h[i].end != h[j].end {
		return h[i].end < h[j].end
	}
	return h[i].slot < h[j].slot
}
func (h busyHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *busyHeap) Push(x any)   { *h = append(*h, x.(busySlot)) }
func (h *busyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
