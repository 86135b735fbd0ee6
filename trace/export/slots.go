package export

import (
	"cmp"
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
//
// The slots are scanned in order for the first free one (100,000
// intervals, 8 in flight: 5 ms, 256: 19 ms, 1024: 48 ms; two heaps of
// free and busy slots took 46, 31 and 43 ms).
func assignSlots(ivs []interval) (slot []int, n int) {
	order := make([]int, len(ivs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(ivs[a].start, ivs[b].start), cmp.Compare(ivs[a].end, ivs[b].end))
	})
	slot = make([]int, len(ivs))
	var ends []int64 // each slot's end: free from then on
	for _, i := range order {
		iv := ivs[i]
		s := slices.IndexFunc(ends, func(end int64) bool { return end <= iv.start })
		if s < 0 {
			s, ends = len(ends), append(ends, 0)
		}
		ends[s], slot[i] = max(iv.end, iv.start), s
	}
	return slot, len(ends)
}
