package kvcheckpoint_test

import (
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// midRun is the bench's record with seven of its ten steps verified: what a step's room
// check (StepRoom) and a commit's (Room) measure in the middle of a run.
func midRun() *kc.Record {
	r := benchRecord()
	r.Status = kc.Running
	for _, name := range r.Pipeline[7:] {
		*r.Step(name) = *kc.NewStep()
	}
	return r
}

func BenchmarkSize(b *testing.B) {
	r := midRun()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := kc.Size(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRoom(b *testing.B) {
	r := midRun()
	b.ReportAllocs()
	for b.Loop() {
		kc.Room(r)
	}
}

func BenchmarkStepRoom(b *testing.B) {
	r := midRun()
	b.ReportAllocs()
	for b.Loop() {
		kc.StepRoom(r, "s08")
	}
}
