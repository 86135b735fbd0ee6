package export

import (
	"cmp"
	"container/heap"
	"slices"
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
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(ivs[a].start, ivs[b].start), cmp.Compare(ivs[a].end, ivs[b].end))
	})
	slot = make([]int, len(ivs))
	// free: the slots free now; busy: the slots in use, by end time.
	free := &minHeap[int]{less: cmp.Less[int]}
	busy := &minHeap[busySlot]{less: func(a, b busySlot) bool { return a.end < b.end || a.end == b.end && a.slot < b.slot }}
	for _, i := range order {
		iv := ivs[i]
		end := max(iv.end, iv.start)
		for busy.Len() > 0 && busy.s[0].end <= iv.start {
			b := heap.Pop(busy).(busySlot)
			heap.Push(free, b.slot)
		}
		var s int
		if free.Len() > 0 {
			s = heap.Pop(free).(int)
		} else {
			s = n
			n++
		}
		slot[i] = s
		heap.Push(busy, busySlot{end: end, slot: s})
	}
	return slot, n
}

// minHeap is a container/heap of T ordered by less.
type minHeap[T any] struct {
	s    []T
	less func(a, b T) bool
}

func (h *minHeap[T]) Len() int           { return len(h.s) }
func (h *minHeap[T]) Less(i, j int) bool { return h.less(h.s[i], h.s[j]) }
func (h *minHeap[T]) Swap(i, j int)      { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *minHeap[T]) Push(x any)         { h.s = append(h.s, x.(T)) }
func (h *minHeap[T]) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}

type busySlot struct {
	end  int64
	slot int
}
