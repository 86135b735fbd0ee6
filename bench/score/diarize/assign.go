package diarize

import "math"

// assign solves the square assignment problem: it returns, for each row i,
// the column p[i] such that the sum of cost[i][p[i]] is least (the
// Hungarian method with potentials, O(n³); scipy's linear_sum_assignment
// finds the same minimum, though it may pick another of equal cost).
// gonum has no assignment solver, hence this one.
func assign(cost [][]float64) []int {
	n := len(cost)
	if n == 0 {
		return nil
	}
	inf := math.Inf(1)
	// 1-based arrays: u, v potentials; p[j] the row matched to column j.
	u := make([]float64, n+1)
	v := make([]float64, n+1)
	p := make([]int, n+1)
	way := make([]int, n+1)
	for i := 1; i <= n; i++ {
		p[0] = i
		j0 := 0
		minv := make([]float64, n+1)
		used := make([]bool, n+1)
		for j := range minv {
			minv[j] = inf
		}
		for {
			used[j0] = true
			i0, delta, j1 := p[j0], inf, 0
			for j := 1; j <= n; j++ {
				if used[j] {
					continue
				}
				cur := cost[i0-1][j-1] - u[i0] - v[j]
				if cur < minv[j] {
					minv[j], way[j] = cur, j0
				}
				if minv[j] < delta {
					delta, j1 = minv[j], j
				}
			}
			for j := 0; j <= n; j++ {
				if used[j] {
					u[p[j]] += delta
					v[j] -= delta
				} else {
					minv[j] -= delta
				}
			}
			j0 = j1
			if p[j0] == 0 {
				break
			}
		}
		for j0 != 0 {
			j1 := way[j0]
			p[j0] = p[j1]
			j0 = j1
		}
	}
	rows := make([]int, n)
	for j := 1; j <= n; j++ {
		rows[p[j]-1] = j - 1
	}
	return rows
}
