package kvcheckpoint_test

import (
	"reflect"
	"sync"
	"testing"
	"time"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// tick is a store clock a test moves by hand.
type tick struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tick) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *tick) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func stampOf(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// progressed_at moves with every write that is progress (a take, a step's write, a status
// change, a command waiting) by the store's clock, and stays through renewals and writes
// that set again what the record says; approval.since is set by the write that begins the
// wait and kept by every later one.
func TestProgressedAtAndApprovalSince(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	clk := &tick{t: time.Date(2026, 10, 13, 22, 0, 0, 0, time.UTC)}
	store, err := kc.Open(ctx, f.js, kc.Bucket, kc.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	created := clk.now()
	if _, err := store.Create(ctx, newRecord("run-1")); err != nil {
		t.Fatal(err)
	}
	progressed := func(want time.Time, when string) *kc.Record {
		t.Helper()
		rec, _ := f.load(t, "run-1")
		if rec.ProgressedAt != stampOf(want) {
			t.Fatalf("%s: progressed_at %s, want %s (updated_at %s)", when, rec.ProgressedAt, stampOf(want), rec.UpdatedAt)
		}
		return rec
	}
	progressed(created, "created")

	clk.advance(time.Minute)
	rec, rev := f.load(t, "run-1")
	h, err := store.Take(ctx, rec, rev, ownerA, "fetch", func(r *kc.Record) { r.Step("fetch").Status = kc.InProgress })
	if err != nil {
		t.Fatal(err)
	}
	took := clk.now()
	progressed(took, "lease taken")

	for range 3 {
		clk.advance(5 * time.Second)
		if err := h.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r := progressed(took, "renewed"); r.UpdatedAt != stampOf(clk.now()) {
		t.Fatalf("renewed: updated_at %s, want %s", r.UpdatedAt, stampOf(clk.now()))
	}

	clk.advance(time.Minute)
	if err := h.Write(ctx, func(r *kc.Record) error { r.Step("fetch").Effects = &kc.Effects{Keys: 3}; return nil }); err != nil {
		t.Fatal(err)
	}
	wrote := clk.now()
	progressed(wrote, "a step's write")

	clk.advance(time.Minute)
	if err := h.Release(ctx, func(r *kc.Record) error {
		r.Status = kc.WaitingApproval
		r.Approval = &kc.Approval{Step: "fetch", PlanDigest: "sha256:aa"}
		r.Step("fetch").Status = kc.Pending
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	began := clk.now()
	if r := progressed(began, "the wait began"); r.Approval.Since != stampOf(began) {
		t.Fatalf("approval.since %q, want %s", r.Approval.Since, stampOf(began))
	}

	// The same next_action written again (a republish) is not progress; a waiting command is.
	clk.advance(time.Hour)
	same := func(r *kc.Record) error { r.NextAction = "waiting"; return nil }
	if _, _, err := store.Mutate(ctx, "run-1", same); err != nil {
		t.Fatal(err)
	}
	set := clk.now()
	clk.advance(time.Hour)
	if _, _, err := store.Mutate(ctx, "run-1", same); err != nil {
		t.Fatal(err)
	}
	progressed(set, "the same next_action again")
	clk.advance(time.Hour)
	if _, _, err := store.Mutate(ctx, "run-1", func(r *kc.Record) error {
		_, err := r.Wait(kc.Command{Verb: "resume", RequestID: "req-1", By: "asha", At: stampOf(clk.now())})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if r := progressed(clk.now(), "a command waits"); r.Approval.Since != stampOf(began) {
		t.Fatalf("approval.since %q after later writes, want %s (when the wait began)", r.Approval.Since, stampOf(began))
	}
}

func TestProgressedIgnoresTheTimeOfTheWriteAndTheWriteID(t *testing.T) {
	before := newRecord("run-1")
	before.Lease = &kc.Lease{Owner: "o", OwnerInbox: "i", Token: 7, Step: "fetch", WriteID: "w-1"}
	after := before.Clone()
	after.UpdatedAt, after.ProgressedAt, after.Sum, after.Lease.WriteID = "later", "later", "other", "w-2"
	if kc.Progressed(before, after) {
		t.Fatal("a renewal counted as progress")
	}
	for name, change := range map[string]func(r *kc.Record){
		"a step's status":    func(r *kc.Record) { r.Step("fetch").Status = kc.Verified },
		"the lease's token":  func(r *kc.Record) { r.Lease.Token = 9 },
		"the lease released": func(r *kc.Record) { r.Lease = nil },
		"a parked item":      func(r *kc.Record) { r.Step("fetch").Parked = append(r.Step("fetch").Parked, kc.Parked{Item: "x"}) },
		"the status":         func(r *kc.Record) { r.Status = kc.Finishing },
	} {
		next := after.Clone()
		change(next)
		if !kc.Progressed(before, next) {
			t.Errorf("%s: not counted as progress", name)
		}
	}
}

// BenchmarkProgressed is what every write pays to decide progressed_at (the worst case: the
// records are equal, so every field is compared).
func BenchmarkProgressed(b *testing.B) {
	r := benchRecord()
	next := r.Clone()
	next.UpdatedAt = "later"
	b.ReportAllocs()
	for b.Loop() {
		if kc.Progressed(r, next) {
			b.Fatal("progress")
		}
	}
}

// Every field of the record is progress but the time of the write, the revision written over, the sum, its signature and the lease's
// write_id: a field added to the record and not compared by Progressed fails here.
func TestProgressedSeesEveryField(t *testing.T) {
	full := &kc.Record{}
	fill(reflect.ValueOf(full).Elem())
	notProgress := map[string]bool{".Prev": true, ".UpdatedAt": true, ".ProgressedAt": true, ".Sum": true, ".Sig.By": true, ".Sig.Key": true, ".Sig.Sig": true, ".Lease.WriteID": true}
	n := 0
	leaves(reflect.ValueOf(full).Elem(), "", func(string, reflect.Value) { n++ })
	if n < 50 {
		t.Fatalf("%d fields found: the walk is broken", n)
	}
	for i := range n {
		next := full.Clone()
		var path string
		j := 0
		leaves(reflect.ValueOf(next).Elem(), "", func(p string, v reflect.Value) {
			if j == i {
				path = p
				change(v)
			}
			j++
		})
		if got := kc.Progressed(full, next); got == notProgress[path] {
			t.Errorf("a change of %s: Progressed = %v", path, got)
		}
	}
}

// fill gives every field of v a value: pointers, one-element slices and maps.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("v")
	case reflect.Int, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint8, reflect.Uint64:
		v.SetUint(1)
	case reflect.Bool:
		v.SetBool(true)
	default:
		panic("fill: " + v.Kind().String())
	}
}

// leaves calls visit on every settable scalar under v, in a fixed order (maps have one entry).
func leaves(v reflect.Value, path string, visit func(path string, v reflect.Value)) {
	switch v.Kind() {
	case reflect.Pointer:
		leaves(v.Elem(), path, visit)
	case reflect.Struct:
		for i := range v.NumField() {
			leaves(v.Field(i), path+"."+v.Type().Field(i).Name, visit)
		}
	case reflect.Slice:
		for i := range v.Len() {
			leaves(v.Index(i), path, visit)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			leaves(v.MapIndex(k), path+"[]", visit) // a *Step: its fields are settable
		}
	default:
		visit(path, v)
	}
}

func change(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint8, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	}
}
