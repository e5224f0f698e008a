package e2e

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/service"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// stallAt24 stalls post-ledger before its 24th ledger write until the process stops.
const stallAt24 = "post-ledger.before-write.24=stall@once"

// fencedPostLedger is the metric a post-ledger instance counts its refused writes in.
const fencedPostLedger = `cairn_fenced_total{step="post-ledger"}`

// allBut is every service except the named ones.
func allBut(names ...string) []string {
	return slices.DeleteFunc(service.Services(), func(s string) bool { return slices.Contains(names, s) })
}

func positive(v float64) bool { return v > 0 }

// ledgerRows counts the ledger's rows.
func (h *procsNight) ledgerRows() int {
	h.t.Helper()
	var rows int
	if err := h.db("ledger.db").QueryRow(`SELECT count(*) FROM ledger_entries`).Scan(&rows); err != nil {
		h.t.Fatal(err)
	}
	return rows
}

// Every service once, each its own process: one uninterrupted night.
func TestServicesNight(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	h := newProcsNight(t)
	steps := allBut("outbox-sender", "supervisor", "compensator")
	ps := h.svcs(steps)
	h.svcs([]string{"outbox-sender", "supervisor", "compensator"})
	h.startRun()
	h.waitStatus(runLimit, kc.Done)
	h.assertTruth()
	for i, name := range steps {
		// The counter may move just after the commit that made the run done.
		h.waitMetric(ps[i], fmt.Sprintf(`cairn_steps_verified_total{step=%q}`, name), func(v float64) bool { return v >= 1 }, 30*time.Second)
	}
}

// post-ledger's process is killed in the middle of the step; another instance finishes it
// once the supervisor has released the dead one's lease.
func TestServicesKillPostLedger(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	h := newProcsNight(t)
	others := allBut("post-ledger")
	ps := h.svcs(others)
	sup := ps[slices.Index(others, "supervisor")]
	a := h.svc("post-ledger", "CAIRN_FAULTS="+stallAt24)
	h.startRun()
	h.waitFired(stallAt24, runLimit)
	a.Kill()
	if rows := h.ledgerRows(); rows != 23 {
		t.Fatalf("after the kill the ledger holds %d rows, want 23", rows)
	}
	h.svc("post-ledger")
	h.waitStatus(runLimit, kc.Done)
	h.assertTruth()
	if c := h.audit(); c["reassigned"] < 1 {
		t.Errorf("audit %v: no reassigned event", c)
	}
	h.waitMetric(sup, "cairn_reassignments_total", positive, 30*time.Second)
}

// A zombie: post-ledger's process is stopped (SIGSTOP) in the middle of the step, another
// instance finishes the night, and the zombie, continued, is fenced and changes nothing.
func TestServicesZombie(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	newProcsNight(t).zombie()
}

// zombie stops post-ledger's process in the middle of the step, lets another instance
// finish the night, continues the zombie and checks that it was fenced and changed nothing.
func (h *procsNight) zombie() {
	t := h.t
	t.Helper()
	fault := "post-ledger.before-write.24=stall:10s@once"
	h.svcs(allBut("post-ledger"))
	a := h.svc("post-ledger", "CAIRN_FAULTS="+fault)
	h.startRun()
	h.waitFired(fault, runLimit)
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	h.svc("post-ledger")
	h.waitStatus(runLimit, kc.Done)
	if err := a.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.waitMetric(a, fencedPostLedger, positive, runLimit)
	h.assertTruth()
	if c := h.audit(); c["fenced"] < 1 {
		t.Errorf("audit %v: no fenced event", c)
	}
	h.waitStatus(time.Minute, kc.Done) // the zombie left the record alone
}

// Two instances of every service, the supervisor and the outbox sender too.
func TestServicesTwoOfEach(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	h := newProcsNight(t)
	h.raceChild()
	names := service.Services()
	ps := h.svcs(append(names, names...))
	h.startRun()
	rec := h.waitStatus(runLimit, kc.Done)
	h.assertTruth()
	// Each step was committed once, by one of its two instances.
	for _, step := range rec.Pipeline {
		key := fmt.Sprintf(`cairn_steps_verified_total{step=%q}`, step)
		i := slices.Index(names, step)
		j := i + len(names)
		ok := poll(30*time.Second, func() bool {
			return metricValue(h.scrape(ps[i]), key)+metricValue(h.scrape(ps[j]), key) == 1
		})
		if !ok {
			t.Errorf("%s over both instances: %v + %v, want 1", key, metricValue(h.scrape(ps[i]), key), metricValue(h.scrape(ps[j]), key))
		}
	}
}

// The nats-server stops in the middle of the night and starts again on the same port and
// storage; the services reconnect and finish the night.
func TestServicesServerRestart(t *testing.T) {
	t.Parallel() // mostly waiting (a stall, an outage, a grace): see TestMain
	h := newProcsNight(t)
	h.svcs(service.Services())
	h.startRun()
	r := h.waitRecord(runLimit, "post-ledger started", func(r *kc.Record) bool {
		return r.Step("post-ledger").Status != kc.Pending
	})
	t.Logf("stopping the server with the run %s, post-ledger %s", r.Status, r.Step("post-ledger").Status)
	h.stopServer()
	h.startServer()
	h.waitStatus(runLimit, kc.Done)
	h.assertTruth()
}

// SIGTERM in the middle of a step: the process gives the step its grace, stops it, exits
// 0, and another instance finishes the night.
func TestServicesSigterm(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	h := newProcsNight(t)
	h.svcs(allBut("post-ledger"))
	a := h.svc("post-ledger", "CAIRN_FAULTS="+stallAt24, "CAIRN_STOP_GRACE=1s")
	h.startRun()
	h.waitFired(stallAt24, runLimit)
	b := h.svc("post-ledger")
	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := a.Wait(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("post-ledger exited %d after SIGTERM, want 0 (log %s)", code, a.Log)
	}
	h.waitStatus(runLimit, kc.Done)
	h.assertTruth()
	h.waitMetric(b, `cairn_steps_verified_total{step="post-ledger"}`, func(v float64) bool { return v == 1 }, 30*time.Second)
}
