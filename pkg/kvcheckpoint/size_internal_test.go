package kvcheckpoint

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// randomRecord is a record as the writers leave one, of random shape: steps pending, in
// progress, verified with inline outputs (compact or not, with HTML characters) or objects,
// failed with long errors, parked lists, a lease, commands, an approval, an undo.
func randomRecord(rng *rand.Rand) *Record {
	steps := 1 + rng.IntN(12)
	var names []string
	for i := range steps {
		names = append(names, fmt.Sprintf("step-%02d%s", i, strings.Repeat("x", rng.IntN(20))))
	}
	runID := "run-" + strings.Repeat("r", rng.IntN(64))
	r := New(runID, StringParams(rng.IntN(2) == 0, "warehouse", "ldh", "date", "2026-10-13"), names, "2026-10-13T22:00:00Z")
	r.Epoch, r.UpdatedAt, r.ProgressedAt = "e0000000", "2026-10-13T22:00:01.123Z", "2026-10-13T22:00:01Z"
	if rng.IntN(3) == 0 { // steps side by side: each waits for some of those before it
		r.After = Graph{}
		for i, name := range names {
			deps := []string{}
			for _, earlier := range names[:i] {
				if rng.IntN(2) == 0 {
					deps = append(deps, earlier)
				}
			}
			r.After[name] = deps
		}
	}
	text := func(n int) string {
		alphabet := []string{"a", "b", " ", "é", "<", "&", "\"", "\\", "\n", "✓", "\x01"}
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	inline := func() json.RawMessage {
		switch rng.IntN(4) {
		case 0:
			return json.RawMessage(`{"run":"` + runID + `","pad":"` + strings.Repeat("p", rng.IntN(900)) + `"}`)
		case 1:
			return json.RawMessage(`{ "z" : [1, "a<b&c"], "a" : {"y": null} }`)
		case 2:
			return json.RawMessage(`["` + strings.Repeat("\u00e9", rng.IntN(100)) + `", 12, true]`)
		default:
			b, _ := json.Marshal(text(rng.IntN(40)))
			return b
		}
	}
	for i, name := range names {
		s := r.Step(name)
		switch rng.IntN(4) {
		case 0: // pending
		case 1:
			s.Status = InProgress
			s.StartedAt = Ptr("2026-10-13T22:00:02.5Z")
		case 2:
			s.Status = Failed
			s.Attempts = rng.IntN(5)
			s.SetLastError(text(rng.IntN(2 * MaxLastError)))
		default:
			s.Status = Verified
			s.StartedAt, s.FinishedAt = Ptr("2026-10-13T22:00:02.5Z"), Ptr("2026-10-13T22:00:03.123456789Z")
			s.Token = Ptr(uint64(rng.IntN(1_000_000)))
			s.Versions = Versions{Code: Ptr("v0.1.0")}
			if rng.IntN(2) == 0 {
				s.Output = &Output{Inline: inline(), Digest: "SHA-256=" + strings.Repeat("b", 43) + "=", Size: 200}
			} else {
				s.Output = &Output{Object: runID + "/" + name + "/" + strings.Repeat("a", 64), Digest: "SHA-256=x", Size: int64(rng.IntN(1 << 30))}
			}
			if rng.IntN(3) == 0 {
				s.LastError = Ptr(text(rng.IntN(MaxKeptError)))
			}
			for j := range rng.IntN(MaxParkedListed + 1) {
				s.Parked = append(s.Parked, Parked{Item: fmt.Sprintf("INV-%04d", j), Reason: text(rng.IntN(48))})
			}
			s.ParkedCount = len(s.Parked) + rng.IntN(100)
			if rng.IntN(2) == 0 {
				s.ParkedArtifact = &Output{Object: runID + "/" + name + "/parked", Digest: "SHA-256=p", Size: 3000}
			}
			s.Effects = &Effects{Keys: i, IntentsOpen: rng.IntN(3)}
		}
	}
	if rng.IntN(2) == 0 {
		c := names[rng.IntN(len(names))]
		r.Lease = &Lease{Owner: c + "/host/4120", OwnerInbox: "cairn.owner." + c, Token: uint64(rng.IntN(1 << 40)), Step: c, WriteID: "w-1"}
	}
	for range rng.IntN(3) {
		r.Commands = append(r.Commands, Command{Verb: "resume", RequestID: RequestKey(text(10)), By: text(rng.IntN(20)), At: "2026-10-13T22:00:00Z", Args: json.RawMessage(`{"after_fix": true}`)})
	}
	for range rng.IntN(4) {
		r.Requests = append(r.Requests, RequestKey(text(8)))
	}
	if rng.IntN(4) == 0 {
		r.Approval = &Approval{Step: names[0], PlanDigest: "SHA-256=d", Since: "2026-10-13T22:00:00Z"}
	}
	if rng.IntN(4) == 0 {
		r.Undo = &Undo{RequestID: "u", Scope: json.RawMessage(`{"steps": ["a", "b"]}`), Total: 3}
	}
	if rng.IntN(3) == 0 {
		r.Snapshot = &Output{Inline: inline(), Digest: "SHA-256=s", Size: 10}
	}
	r.NextAction = text(rng.IntN(MaxNextAction))
	return r
}

// Size by length, without the sum or the stored bytes, is the length of the record as
// encoded, on many records and on the fullest projections Room, StepRoom and CommandRoom
// measure: so the cheap Room is the Room of Clone and Encode, exactly.
func TestSizeIsTheEncodedLength(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(15, 18))
	check := func(what string, r *Record) {
		t.Helper()
		got, err := Size(r)
		want, werr := sizeEncoded(r)
		if got != want || err != nil || werr != nil {
			t.Fatalf("%s: Size %d (%v), encoded %d (%v)", what, got, err, want, werr)
		}
	}
	for i := range 3000 {
		r := randomRecord(rng)
		check(fmt.Sprintf("record %d", i), r)
		var ahead []string
		for _, s := range r.Pipeline {
			if r.Step(s).Status != Verified {
				ahead = append(ahead, s)
			}
		}
		for _, others := range []bool{false, true} {
			p := r.Clone()
			projectFullest(p, ahead, others)
			check(fmt.Sprintf("record %d, projected (others %t)", i, others), p)
		}
		p := r.Clone()
		projectFullest(p, ahead[:min(len(ahead), 1)], false)
		check(fmt.Sprintf("record %d, one step projected", i), p)
	}
}

// FuzzSize: Size is the encoded length for any record the fuzzer makes.
func FuzzSize(f *testing.F) {
	f.Add("run-1", "ldh", "2026-10-13", int64(1), int64(2), []byte(`{"a":[1,"é<"]}`))
	f.Add("a\"b\\c\n\x01\u2028<>&", "\xff\xfe", "é✓😀", int64(-1), int64(999999999999999), []byte(` [ {"b":1,"a":2} ] `))
	f.Add("", "", "", int64(3), int64(1234567890123456), []byte(`null`))
	f.Add("x", "y", "z", int64(4), int64(0), []byte(`1.5`))
	f.Add("x", "y", "z", int64(5), int64(0), []byte(" \"\u2028 <b>\" "))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, n1, n2 int64, raw []byte) {
		r := fuzzRecord(s1, s2, s3, n1, n2, raw)
		if !json.Valid(raw) {
			return
		}
		got, err := Size(r)
		want, werr := sizeEncoded(r)
		if got != want || (err == nil) != (werr == nil) {
			t.Fatalf("Size %d (%v), encoded %d (%v)", got, err, want, werr)
		}
	})
}

// OutputSize is what a record's size changes by when an output takes another's place.
func TestOutputSizeIsTheChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 4))
	for i := range 2000 {
		r := randomRecord(rng)
		var name string
		for _, s := range r.Pipeline {
			if st := r.Step(s); st.Output != nil {
				name = s
			}
		}
		if name == "" {
			continue
		}
		before, err := sizeEncoded(r)
		if err != nil {
			t.Fatal(err)
		}
		old := r.Step(name).Output
		moved := &Output{Object: r.RunID + "/" + name + "/" + strings.Repeat("f", 64), Digest: old.Digest, Size: old.Size}
		r.Step(name).Output = moved
		after, _ := sizeEncoded(r)
		if got, want := OutputSize(old)-OutputSize(moved), before-after; got != want {
			t.Fatalf("record %d: OutputSize says %d bytes back, the record gives %d back (inline %s)", i, got, want, old.Inline)
		}
	}
}

// Room, StepRoom and CommandRoom on their cheap copy (projection) are what they are on a
// deep copy (Clone), and leave the record as it was.
func TestRoomsOnACheapCopy(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(4, 15))
	for i := range 3000 {
		r := randomRecord(rng)
		before, err := sizeEncoded(r)
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := json.Marshal(r)
		var ahead []string
		for _, s := range r.Pipeline {
			if r.Step(s).Status != Verified {
				ahead = append(ahead, s)
			}
		}
		if got, want := Room(r), room(r.Clone(), ahead, true)-slack; got != want {
			t.Fatalf("record %d: Room %d, on a deep copy %d", i, got, want)
		}
		var current []string
		if c := r.Current(); c != "" && r.Index(c) >= 0 {
			current = []string{c}
		}
		lentCopy := r.Clone()
		lent(lentCopy)
		if got, want := CommandRoom(r), room(lentCopy, current, true)-slack; got != want {
			t.Fatalf("record %d: CommandRoom %d, on a deep copy %d", i, got, want)
		}
		for _, step := range append(slices.Clone(r.Pipeline), "") {
			d := r.Clone()
			for _, s := range d.Pipeline {
				if st := d.Step(s); st.Status == Verified {
					st.LastError = nil
					if st.ParkedArtifact != nil {
						st.Parked = []Parked{}
					}
				}
			}
			lent(d)
			var one []string
			if d.Index(step) >= 0 {
				one = []string{step}
			}
			if got, want := StepRoom(r, step), room(d, one, false); got != want {
				t.Fatalf("record %d: StepRoom(%q) %d, on a deep copy %d", i, step, got, want)
			}
		}
		after, _ := sizeEncoded(r)
		if enc2, _ := json.Marshal(r); before != after || string(enc) != string(enc2) {
			t.Fatalf("record %d changed by measuring its room:\n%s\n%s", i, enc, enc2)
		}
	}
}

// rewritten is bytes.ContainsAny of the characters encoding/json rewrites.
func TestRewritten(t *testing.T) {
	for _, s := range []string{"", "{}", `{"a":1}`, " ", "\t", "\r", "\n", "<", ">", "&", "\u2028", "\u2029", "\u2027", "\u202a", "\xe2\x80", "\xe2", "é✓😀", `"a\u2028"`, `"x` + "\u2029", "\xe2\x80\xa8", "\xe2\x81\xa8"} {
		if got, want := rewritten([]byte(s)), strings.ContainsAny(s, " \t\r\n<>&\u2028\u2029"); got != want {
			t.Errorf("rewritten(%q) = %t, want %t", s, got, want)
		}
	}
}

// Room projects all StepRoom of the first step ahead does and more (the steps after it, the
// other writers, the slack) and gives up no diagnostics: Room ≤ StepRoom - slack, so a
// commit that keeps the next step's room need not ask Room too (the runner's fitOutputs).
func TestRoomWithinStepRoom(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 7))
	for i := range 3000 {
		r := randomRecord(rng)
		first := ""
		for _, s := range r.Pipeline {
			if r.Step(s).Status != Verified {
				first = s
				break
			}
		}
		if first == "" {
			continue
		}
		if room, step := Room(r), StepRoom(r, first); room > step-slack {
			t.Fatalf("record %d: Room %d, StepRoom(%s) %d", i, room, first, step)
		}
	}
}

// StepRoom from the record's size and what the projection adds (stepRoomBySize) is, on
// thousands of records, exactly StepRoom on the projected record, and takes every record
// the straight writer takes.
//
// The records come from two generators of their own, 2,500 each, checked side by side: under
// -race this is the package's longest test, and the two halves use both cores.
func TestStepRoomBySize(t *testing.T) {
	t.Parallel()
	for half := range uint64(2) {
		t.Run(fmt.Sprintf("records-%d", half+1), func(t *testing.T) {
			t.Parallel()
			stepRoomBySizeOn(t, rand.New(rand.NewPCG(18, 2+half)), 2500)
		})
	}
}

func stepRoomBySizeOn(t *testing.T, rng *rand.Rand, records int) {
	statuses := []Status{Running, HandedOver, WaitingApproval, Done, Cancelled, "a\"b"}
	fast := 0
	for i := range records {
		r := randomRecord(rng)
		// What randomRecord leaves at its zero: a handover, a progress count, a source
		// fingerprint, counts of every length, another status, no steps at all.
		if rng.IntN(3) == 0 {
			r.Handover = Ptr(r.RunID + ":handover:" + strings.Repeat("h", rng.IntN(40)))
		}
		if rng.IntN(3) == 0 {
			r.Progress = &Progress{Step: r.Pipeline[0], Count: rng.IntN(20_000_000), NoProgress: rng.IntN(3)}
		}
		if rng.IntN(3) == 0 {
			r.SourceFingerprint = Ptr("sha256:" + strings.Repeat("f", rng.IntN(80)))
		}
		if rng.IntN(3) == 0 {
			r.Snapshot = &Output{Object: r.RunID + "/stock/" + strings.Repeat("a", rng.IntN(70)), Digest: "SHA-256=s", Size: 10}
		}
		r.Restarts, r.Generation = rng.IntN(20_000_000), rng.IntN(20_000_000)
		r.Status = statuses[rng.IntN(len(statuses))]
		if rng.IntN(50) == 0 {
			r.Pipeline = nil
		}
		// The size a write reports (encodeSized, as the store remembers it) is the written
		// record's Size, and measures the same room.
		written := r.Clone()
		_, size, encErr := encodeSized(written, nil)
		if encErr == nil && size > 0 {
			if n, _ := Size(written); n != size {
				t.Fatalf("record %d: written with size %d, Size %d", i, size, n)
			}
		}
		for _, step := range append(slices.Clone(r.Pipeline), "", "not-a-step") {
			want := stepRoomProjected(r, step)
			if encErr == nil && size > 0 {
				if got := StepRoomSized(written, step, size); got != want {
					t.Fatalf("record %d: StepRoomSized(%q) %d, projected %d", i, step, got, want)
				}
			}
			got, ok := stepRoomBySize(r, step, 0)
			if ok {
				fast++
				if got != want {
					t.Fatalf("record %d: StepRoom(%q) by size %d, projected %d", i, step, got, want)
				}
			}
			if StepRoom(r, step) != want {
				t.Fatalf("record %d: StepRoom(%q) %d, projected %d", i, step, StepRoom(r, step), want)
			}
		}
	}
	if fast == 0 {
		t.Fatal("no record measured by size")
	}
	t.Logf("%d rooms measured by size", fast)
}

// movable holds an inline output to the pointer a move gives it: one it calls movable is
// longer than that pointer as the record writes it, and one it keeps is not longer.
func TestMovableIsLongerThanItsPointer(t *testing.T) {
	for _, n := range []int{2, 40, 100, 120, 140, 160, 180, 200, 1024} {
		for _, run := range []string{"r", strings.Repeat("r", 64)} {
			inline := []byte(`"` + strings.Repeat("x", n-2) + `"`)
			o := &Output{Inline: inline, Digest: "SHA-256=" + strings.Repeat("A", 43) + "=", Size: int64(n)}
			ptr := objectPointer(run, len("step"))
			if got, want := pointerLen(run, "step"), OutputSize(ptr); got != want {
				t.Fatalf("pointerLen %d, the pointer's written length %d", got, want)
			}
			longer := OutputSize(o) > OutputSize(ptr)
			if got := movable(run, "step", o); got != longer {
				t.Errorf("%d bytes inline, run id of %d: movable %t, but inline %d bytes against a pointer of %d", n, len(run), got, OutputSize(o), OutputSize(ptr))
			}
		}
	}
}
