package kvcheckpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// benchRecord is a finished run of ten steps, each with a 200-byte inline output: the record
// `cairn bench transitions` commits, about 6.5 KB.
func benchRecord() *kc.Record {
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("s%02d", i+1)
	}
	r := kc.New("bench-000001", kc.StringParams(false, "warehouse", "bench", "date", "2026-10-13"), names, "2026-10-13T22:00:03Z")
	r.Epoch = testEpoch
	for i, name := range names {
		s := r.Step(name)
		s.Status = kc.Verified
		s.FinishedAt = kc.Ptr("2026-10-13T22:00:04.123456789Z")
		out := `{"run":"bench-000001","step":"` + name + `","pad":"` + strings.Repeat("x", 156) + `"}`
		s.Output = &kc.Output{Inline: json.RawMessage(out), Digest: "SHA-256=Xq0e2pOQdUAzdKmZfK5Ht5jQdKPiwStPD6X3SkYDuZk=", Size: int64(len(out))}
		s.Versions.Code = kc.Ptr("v0.1.0")
		s.Token = kc.Ptr(uint64(1000 + i))
	}
	r.Status = kc.Finishing
	return r
}

func BenchmarkEncode(b *testing.B) {
	r := benchRecord()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := kc.Encode(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	enc, err := kc.Encode(benchRecord())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := kc.Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClone(b *testing.B) {
	r := benchRecord()
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Clone()
	}
}

// BenchmarkCommit is a lease-free step's commit on an embedded server with file storage:
// clone the record read, apply the step's change, encode, compare-and-set.
func BenchmarkCommit(b *testing.B) {
	f := setup(b)
	ctx := context.Background()
	r := benchRecord()
	r.Status = kc.Running
	if _, err := f.store.Create(ctx, r); err != nil {
		b.Fatal(err)
	}
	cur, rev, err := f.store.Load(ctx, r.RunID)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		cur, rev, err = f.store.MutateFrom(ctx, cur, rev, r.RunID, func(n *kc.Record) error {
			n.Step("s10").Attempts = i
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad is the runner's read of a record: a KV get and Decode.
func BenchmarkLoad(b *testing.B) {
	f := setup(b)
	ctx := context.Background()
	if _, err := f.store.Create(ctx, benchRecord()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := f.store.Load(ctx, "bench-000001"); err != nil {
			b.Fatal(err)
		}
	}
}
