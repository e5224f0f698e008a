package faultmap

import (
	"fmt"
	"strings"
	"time"
)

// Crash is one crash point of a chaos run (`cairn chaos --pipeline P`, package chaos) as the
// map shows it at its step: whether it fired, and how the run it crashed differed from an
// uninterrupted one.
type Crash struct {
	Point       string `json:"point"`
	Fired       bool   `json:"fired"`
	Duplicates  int    `json:"duplicates"`
	Differences int    `json:"differences"`
	First       string `json:"first,omitempty"` // the first difference
}

// Bad reports whether the point differed from the uninterrupted run or never fired.
func (c Crash) Bad() bool { return c.Differences > 0 || !c.Fired }

// Chaos adds to the map the crash points of the last chaos run, made at, by step
// (StepMap.Crashes, Map.ChaosAt). A step with no point has none.
func (m *Map) Chaos(at time.Time, byStep map[string][]Crash) {
	m.ChaosAt = at.UTC().Format(time.RFC3339)
	for i := range m.Steps {
		m.Steps[i].Crashes = byStep[m.Steps[i].Name]
	}
}

// chaosText says what the last chaos run found at a step.
func chaosText(cs []Crash, at string) string {
	if len(cs) == 0 {
		return fmt.Sprintf("no crash point here in the run of %s", at)
	}
	var bad []string
	for _, c := range cs {
		switch {
		case !c.Fired:
			bad = append(bad, c.Point+" never fired")
		case c.Bad():
			s := fmt.Sprintf("%s: %d differences, %d duplicates", c.Point, c.Differences, c.Duplicates)
			if c.First != "" {
				s += " (" + c.First + ")"
			}
			bad = append(bad, s)
		}
	}
	if len(bad) == 0 {
		return fmt.Sprintf("%d crash points (%s), each ended as the uninterrupted run: %s", len(cs), at, points(cs))
	}
	return fmt.Sprintf("%d of %d crash points (%s) differ: %s", len(bad), len(cs), at, strings.Join(bad, "; "))
}

func points(cs []Crash) string {
	var out []string
	for _, c := range cs {
		p, _, _ := strings.Cut(c.Point, "=")
		_, p, _ = strings.Cut(p, ".")
		out = append(out, p)
	}
	return strings.Join(out, ", ")
}
