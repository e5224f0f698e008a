package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// codeVersions are the code versions the run's steps recorded, in pipeline order, each once.
func codeVersions(r *kc.Record) []string {
	var vs []string
	for _, name := range r.Pipeline {
		if c := r.Step(name).Versions.Code; c != nil && !slices.Contains(vs, *c) {
			vs = append(vs, *c)
		}
	}
	return vs
}

// printCode prints the code the run's steps ran under (cairn status).
func printCode(out io.Writer, r *kc.Record) {
	if vs := codeVersions(r); len(vs) > 0 {
		fmt.Fprintf(out, "code       %s\n", strings.Join(vs, " then "))
	}
}

// stepFacts is what cairn status adds to a step's line from its record: the writes it began
// and never confirmed (effects.intents_open), the start of its input fingerprint, and its
// code when the run's steps ran under more than one.
func stepFacts(r *kc.Record, s *kc.Step) string {
	var b strings.Builder
	if e := s.Effects; e != nil && e.IntentsOpen > 0 {
		fmt.Fprintf(&b, ", %d %s begun, not confirmed", e.IntentsOpen, plural(e.IntentsOpen, "write", "writes"))
	}
	if fp := s.InputFingerprint; fp != nil {
		fmt.Fprintf(&b, ", input %s", (*fp)[:min(len(*fp), len("sha256:")+12)])
	}
	if c := s.Versions.Code; c != nil && len(codeVersions(r)) > 1 {
		fmt.Fprintf(&b, ", code %s", *c)
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
