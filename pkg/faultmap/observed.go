package faultmap

import (
	"slices"
	"time"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Observed is what the records of a pipeline's recent runs show of one step: how long its
// verified attempts took, from the attempt's start to its commit (the work a crash just
// before the commit loses, when the step saves nothing before it), and how many attempts
// failed or were restarted.
type Observed struct {
	Runs     int   `json:"runs"`      // runs whose record has the step verified, with both times
	MedianMS int64 `json:"median_ms"` // the median of their durations
	MaxMS    int64 `json:"max_ms"`    // the longest
	Retried  int   `json:"retried"`   // attempts beyond the first, over every run read
}

// Observe adds to the map what recs, records of its pipeline's recent runs, show of each
// step (StepMap.Observed), and how many runs it read (Map.RunsRead). Records of another
// pipeline's steps add nothing; a step that no run verified has no Observed.
func (m *Map) Observe(recs []*kc.Record) {
	took := map[string][]int64{}
	retried := map[string]int{}
	for _, r := range recs {
		for name, s := range r.Steps {
			retried[name] += s.Attempts
			if s.Status != kc.Verified || s.StartedAt == nil || s.FinishedAt == nil {
				continue
			}
			from, err1 := time.Parse(time.RFC3339Nano, *s.StartedAt)
			to, err2 := time.Parse(time.RFC3339Nano, *s.FinishedAt)
			if err1 != nil || err2 != nil || to.Before(from) {
				continue
			}
			took[name] = append(took[name], to.Sub(from).Milliseconds())
		}
	}
	m.RunsRead = len(recs)
	for i := range m.Steps {
		st := &m.Steps[i]
		ms := took[st.Name]
		if len(ms) == 0 {
			st.Observed = nil
			continue
		}
		slices.Sort(ms)
		st.Observed = &Observed{Runs: len(ms), MedianMS: ms[len(ms)/2], MaxMS: ms[len(ms)-1], Retried: retried[st.Name]}
	}
	for i := range m.Steps {
		m.Steps[i].Loss = lossText(m.Steps[i])
	}
}

// lossText says how much work a crash of the step loses, from what it saves as it goes and
// how long it was seen to take.
func lossText(st StepMap) string {
	o := st.Observed
	var kept string
	switch {
	case st.Memo != "" && st.Key != "":
		kept = "every answer memoised and every keyed write made before it stays"
	case st.Memo != "":
		kept = "every answer memoised before it stays"
	case st.Key != "":
		kept = "every keyed write made before it stays"
	}
	switch {
	case o == nil && kept != "":
		return "the item in hand: " + kept + " (no recent run to time it)"
	case o == nil:
		return "its attempt so far: it saves only at its commit (no recent run to time it)"
	case kept != "":
		return "the item in hand: " + kept + "; the whole step took " + ms(o.MaxMS) + " at most"
	}
	return "up to " + ms(o.MaxMS) + ", its attempt so far: it saves only at its commit"
}

func ms(n int64) string { return (time.Duration(n) * time.Millisecond).String() }
