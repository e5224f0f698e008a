package supervisor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Ten resumes with 500-byte request ids are each refused as they are decoded, the refusal
// naming the field and its limit and recorded on cairn.rejected; the record is not written.
func TestCommandsWithLongRequestIDsAreRejected(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", func(r *kc.Record) { r.Status = kc.HandedOver })
	f.take(t, "r1", "a", kc.Owner{Name: "a/host/1", Inbox: "cairn.owner.a.one"}) // the resumes would wait
	_, rev := f.load(t, "r1")
	for i := range 10 {
		id := fmt.Sprintf("%03d", i) + strings.Repeat("x", 497)
		f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"request_id":"`+id+`"}`)
	}
	rec, rev2 := f.load(t, "r1")
	if rev2 != rev || len(rec.Commands) != 0 || len(rec.Requests) != 0 {
		t.Fatalf("revision %d (was %d), commands %+v, requests %v: want nothing written", rev2, rev, rec.Commands, rec.Requests)
	}
	rej := f.rejections(t)
	if len(rej) != 10 {
		t.Fatalf("%d rejections, want 10", len(rej))
	}
	for _, r := range rej {
		if want := fmt.Sprintf("request_id is 500 bytes, at most %d", events.MaxRequestID); !strings.Contains(r.data.Reason, want) {
			t.Fatalf("rejection reason %q, want it to say %q", r.data.Reason, want)
		}
	}
	f.settled(t)
}

// An approve whose by is 10 KB is refused, recorded, and the run still waits; an approve
// with a name within MaxName then goes through.
func TestApproveWithALongByIsRejected(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.waiting(t, "r1")
	f.command(t, s, events.RunSubject("r1", events.VerbApprove), `{"request_id":"ap-1","by":"`+strings.Repeat("b", 10*1024)+`"}`)
	f.settled(t)
	rec, _ := f.load(t, "r1")
	if rec.Status != kc.WaitingApproval || rec.Approval.By != nil {
		t.Fatalf("status %s, approval %+v: want the run still waiting", rec.Status, rec.Approval)
	}
	rej := f.rejections(t)
	if want := fmt.Sprintf("by is %d bytes, at most %d", 10*1024, events.MaxName); len(rej) != 1 || !strings.Contains(rej[0].data.Reason, want) {
		t.Fatalf("rejections %+v, want one saying %q", rej, want)
	}
	by := strings.Repeat("n", events.MaxName)
	f.command(t, s, events.RunSubject("r1", events.VerbApprove), `{"request_id":"ap-2","by":"`+by+`"}`)
	rec, rev := f.load(t, "r1")
	if rec.Status != kc.Running || rec.Approval.By == nil || *rec.Approval.By != by {
		t.Fatalf("after a good approve: status %s, approval %+v", rec.Status, rec.Approval)
	}
	stepEvent(t, f.published(t), "r1", "c", rev, 0)
	f.settled(t)
}

// A command whose effect would leave its run's record no room is refused before it is
// written, and the record stays writable: here a resume (with a legal 64-byte id) of a
// record so full (of what no move to the artifact store gives back) that, once resumed, no
// worker could take its lease.
func TestCommandThatWouldNotFitIsRejected(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	owner := kc.Owner{Name: "b/host/1", Inbox: "cairn.owner.b.one"}
	id := strings.Repeat("i", 64)
	full := func(pad int) *kc.Record {
		r := kc.New("r1", ldh, abc.Names(), "2026-10-13T22:00:00Z")
		r.Status = kc.HandedOver
		a := r.Step("a")
		a.Status = kc.Verified
		// A parked list the record holds alone (no artifact): room no move gives back, as
		// an inline output's would be (room lent: kvcheckpoint).
		a.Parked, a.ParkedCount = []kc.Parked{{Item: strings.Repeat("o", pad), Reason: "unreadable"}}, 1
		return r
	}
	leased := func(r *kc.Record) int {
		r = r.Clone()
		r.Lease = &kc.Lease{Owner: owner.Name, OwnerInbox: owner.Inbox, Token: 99, Step: "b", WriteID: strings.Repeat("w", 24)}
		n, err := kc.Size(r)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The largest pad with which the record still takes a lease, less a margin a resume
	// (its request id, its status and next action) is larger than.
	pad := 0
	for leased(full(pad+1)) <= kc.MaxSize {
		pad++
	}
	pad -= 40
	f.create(t, "r1", func(r *kc.Record) { *r = *full(pad) })
	_, rev := f.load(t, "r1")

	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"request_id":"`+id+`"}`)

	rec, rev2 := f.load(t, "r1")
	if rev2 != rev || rec.Status != kc.HandedOver || rec.HasRequest(id) {
		t.Fatalf("revision %d (was %d), status %s: want the resume refused and nothing written", rev2, rev, rec.Status)
	}
	if rej := f.rejections(t); len(rej) != 1 || !strings.Contains(rej[0].data.Reason, "would leave the record") {
		t.Fatalf("rejections %+v, want the resume's", rej)
	}
	// The run stays writable: a worker may still take its lease.
	if _, err := f.store.Take(f.ctx, rec, rev2, owner, "b", nil); err != nil {
		if errors.Is(err, kc.ErrTooLarge) {
			t.Fatalf("the record is wedged: %v", err)
		}
		t.Fatalf("taking the lease: %v", err)
	}
	f.settled(t)
}

// A resume of a record as full as that, but of an inline output, goes through: the output's
// room is lent (kvcheckpoint), for the write that needs it moves the output out.
func TestCommandIsNotRefusedForAnInlineOutputsRoom(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	r := kc.New("r1", ldh, abc.Names(), "2026-10-13T22:00:00Z")
	r.Status = kc.HandedOver
	a := r.Step("a")
	a.Status = kc.Verified
	pad := 6500
	a.Output = &kc.Output{Inline: []byte(`"` + strings.Repeat("o", pad) + `"`), Digest: "SHA-256=x", Size: int64(pad + 2)}
	if kc.CommandRoom(r) < 0 {
		t.Fatalf("CommandRoom %d: the inline output is not counted as room lent", kc.CommandRoom(r))
	}
	f.create(t, "r1", func(n *kc.Record) { *n = *r })
	id := strings.Repeat("i", 64)
	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"request_id":"`+id+`"}`)
	rec, _ := f.load(t, "r1")
	if rec.Status != kc.Running || !rec.HasRequest(id) {
		t.Fatalf("status %s, request recorded %t: want the run resumed", rec.Status, rec.HasRequest(id))
	}
	if rej := f.rejections(t); len(rej) != 0 {
		t.Fatalf("rejections %+v, want none", rej)
	}
	f.settled(t)
}

// An approve takes no room its run's budget did not keep for it: on a record already full
// (its room negative) the approve, with a name, or with none (a plain nats pub), goes through.
func TestApproveOfAFullRecordGoesThrough(t *testing.T) {
	for _, body := range []string{``, `{"by":"` + strings.Repeat("n", events.MaxName) + `"}`} {
		f := setup(t)
		s := f.supervisor(t)
		f.create(t, "r1", func(r *kc.Record) {
			tok := uint64(3)
			for _, name := range []string{"a", "b"} {
				r.Step(name).Status = kc.Verified
				r.Step(name).Token = &tok
			}
			r.Step("a").Output = &kc.Output{Inline: []byte(`"` + strings.Repeat("o", 5000) + `"`), Digest: "SHA-256=x", Size: 5002}
			r.Status = kc.WaitingApproval
			r.Approval = &kc.Approval{Step: "c", PlanDigest: "SHA-256=plan", Since: "2026-10-13T22:00:00Z"}
		})
		if rec, _ := f.load(t, "r1"); kc.Room(rec) >= 0 {
			t.Fatalf("room %d, want a record already full", kc.Room(rec))
		}
		f.command(t, s, events.RunSubject("r1", events.VerbApprove), body)
		rec, rev := f.load(t, "r1")
		if rec.Status != kc.Running || rec.Approval.By == nil {
			t.Fatalf("approve %q: status %s, approval %+v, rejections %+v", body, rec.Status, rec.Approval, f.rejections(t))
		}
		stepEvent(t, f.published(t), "r1", "c", rev, 0)
		f.settled(t)
	}
}

// A resume that waits for the lease of a full record is kept (Record.Wait's rule: the
// current step's room), not refused by the record's room.
func TestAWaitingResumeOfAFullRecordIsKept(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	owner := kc.Owner{Name: "b/host/1", Inbox: "cairn.owner.b.one"}
	full := func(pad int) *kc.Record {
		r := kc.New("r1", ldh, abc.Names(), "2026-10-13T22:00:00Z")
		r.Status = kc.Cancelled
		r.Step("a").Status = kc.Verified
		r.Step("a").Output = &kc.Output{Inline: []byte(`"` + strings.Repeat("o", pad) + `"`), Digest: "SHA-256=x", Size: int64(pad + 2)}
		return r
	}
	leased := func(r *kc.Record) *kc.Record {
		r = r.Clone()
		r.Lease = &kc.Lease{Owner: owner.Name, OwnerInbox: owner.Inbox, Token: 99, Step: "b", WriteID: strings.Repeat("w", 24)}
		return r
	}
	pad := 0
	for kc.Room(leased(full(pad))) >= 0 {
		pad += 10
	}
	if kc.StepRoom(leased(full(pad)), "b") < 400 {
		t.Fatalf("no record whose room is negative and whose current step has room for a waiting command")
	}
	f.create(t, "r1", func(r *kc.Record) { *r = *full(pad) })
	f.take(t, "r1", "b", owner)
	f.command(t, s, events.RunSubject("r1", events.VerbResume), `{"request_id":"resume-1"}`)
	if rec, _ := f.load(t, "r1"); rec.Waiting("resume-1") == nil {
		t.Fatalf("commands %+v, rejections %+v: want the resume waiting", rec.Commands, f.rejections(t))
	}
	f.settled(t)
}
