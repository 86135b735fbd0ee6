package bundle

import (
	"encoding/json"
	"math"
)

// Estimate is a value with its confidence interval [Lo, Hi] and what it
// stands on (N): the validity checks' intervals in manifest.json's
// extra.validity and results.json. Lo = Hi = Value when there is nothing
// to vary; NaN where it cannot be had, written as null.
type Estimate struct {
	Value float64 `json:"value"`
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	N     int     `json:"n"`
}

// MarshalJSON writes what cannot be had (NaN, ±Inf) as null.
func (e Estimate) MarshalJSON() ([]byte, error) {
	num := func(x float64) any {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return x
	}
	return json.Marshal(struct {
		Value any `json:"value"`
		Lo    any `json:"lo"`
		Hi    any `json:"hi"`
		N     int `json:"n"`
	}{num(e.Value), num(e.Lo), num(e.Hi), e.N})
}
