package kvcheckpoint

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// decodeBenchRecord is the record of codec_bench_test.go's benchRecord: ten verified
// steps, each with a 200-byte inline output, about 6.5 KB.
func decodeBenchRecord(b *testing.B) []byte {
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("s%02d", i+1)
	}
	r := New("bench-000001", StringParams(false, "source", "bench", "date", "2026-10-13"), names, "2026-10-13T22:00:03Z")
	for i, name := range names {
		s := r.Step(name)
		s.Status = Verified
		s.FinishedAt = Ptr("2026-10-13T22:00:04.123456789Z")
		out := `{"run":"bench-000001","step":"` + name + `","pad":"` + strings.Repeat("x", 156) + `"}`
		s.Output = &Output{Inline: json.RawMessage(out), Digest: "SHA-256=Xq0e2pOQdUAzdKmZfK5Ht5jQdKPiwStPD6X3SkYDuZk=", Size: int64(len(out))}
		s.Versions.Code = Ptr("v0.1.0")
		s.Token = Ptr(uint64(1000 + i))
	}
	enc, err := Encode(r)
	if err != nil {
		b.Fatal(err)
	}
	return enc
}

// The hand-written decoder against encoding/json on the same record, the decode alone
// (Decode's sum check is the same for both): what its lines earn.
func BenchmarkDecodeRecord(b *testing.B) {
	enc := decodeBenchRecord(b)
	b.Run("hand-written", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeRecord(enc); !ok {
				b.Fatal("the decoder gave up")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			var r Record
			if err := json.Unmarshal(enc, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
