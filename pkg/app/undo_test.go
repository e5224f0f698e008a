package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/undo"
)

// rowsDB is a real outside system: a SQLite file that holds each run's rows under their key
// (the primary key), the reversal rows an undo makes ("<key>:rev", the negated amount, also
// keyed), the log of every reversal it was asked for in the order it received them, and a
// fence per run (package fence) that every write checks in its transaction.
type rowsDB struct{ db *sql.DB }

func openRows(t *testing.T, path string) *rowsDB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	for _, q := range []string{fence.Schema,
		`CREATE TABLE rows (key TEXT PRIMARY KEY, run_id TEXT NOT NULL, region TEXT NOT NULL, amount INTEGER NOT NULL, token INTEGER NOT NULL)`,
		`CREATE TABLE reversals (key TEXT PRIMARY KEY, original TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL, amount INTEGER NOT NULL, token INTEGER NOT NULL)`,
		`CREATE TABLE received (seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, key TEXT NOT NULL, made INTEGER NOT NULL)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return &rowsDB{db: db}
}

// write stores row key of a run, fenced by t; a repeat of a key is a no-op.
func (r *rowsDB) write(ctx context.Context, t fence.Token, key, region string, amount int64) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fence.Hold(ctx, tx, fence.SQLite, "fences", t); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO rows (key, run_id, region, amount, token) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`,
		key, t.RunID, region, amount, t.Value); err != nil {
		return err
	}
	return tx.Commit()
}

// rowsSystem is rowsDB as the undo's System "rows".
type rowsSystem struct{ *rowsDB }

func (s rowsSystem) RaiseFence(ctx context.Context, t fence.Token, _ *kc.Record) error {
	return fence.Hold(ctx, s.db, fence.SQLite, "fences", t)
}

// Reverse writes the negation of the row the table holds under the effect's key (none: the
// write never landed, nothing to reverse), under the reversal's key, fenced by t.
func (s rowsSystem) Reverse(ctx context.Context, t fence.Token, rec *kc.Record, e saga.Effect) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if err := fence.Hold(ctx, tx, fence.SQLite, "fences", t); err != nil {
		return false, err
	}
	var amount int64
	var region string
	made := false
	switch err := tx.QueryRowContext(ctx, `SELECT amount, region FROM rows WHERE key = ?`, e.Intent.Key).Scan(&amount, &region); {
	case err == sql.ErrNoRows:
	case err != nil:
		return false, err
	case region == "locked": // a refusal no retry changes
		return false, runner.Permanent(fmt.Errorf("row %s is in a closed period: the system refuses its reversal", e.Intent.Key))
	default:
		res, err := tx.ExecContext(ctx, `INSERT INTO reversals (key, original, run_id, amount, token) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`,
			e.Intent.Reverse.Key, e.Intent.Key, rec.RunID, -amount, t.Value)
		if err != nil {
			return false, err
		}
		n, _ := res.RowsAffected()
		made = n == 1
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO received (run_id, key, made) VALUES (?, ?, ?)`, rec.RunID, e.Intent.Reverse.Key, made); err != nil {
		return false, err
	}
	return made, tx.Commit()
}

// received is run's reversal requests as the system received them: "<key>" for one that
// made a reversal, "<key>=" for one that found it made.
func (r *rowsDB) received(t *testing.T, run string) []string {
	t.Helper()
	rows, err := r.db.Query(`SELECT key, made FROM received WHERE run_id = ? ORDER BY seq`, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var key string
		var made bool
		if err := rows.Scan(&key, &made); err != nil {
			t.Fatal(err)
		}
		if !made {
			key += "="
		}
		out = append(out, strings.TrimPrefix(key, run+":"))
	}
	return out
}

// reversed is the originals run's reversal rows negate, by key, with their amounts.
func (r *rowsDB) reversed(t *testing.T, run string) map[string]int64 {
	t.Helper()
	rows, err := r.db.Query(`SELECT original, amount FROM reversals WHERE run_id = ?`, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var key string
		var amount int64
		if err := rows.Scan(&key, &amount); err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(key, run+":")] = amount
	}
	return out
}

func (r *rowsDB) count(t *testing.T, run string) int {
	t.Helper()
	var n int
	if err := r.db.QueryRow(`SELECT count(*) FROM rows WHERE run_id = ?`, run).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// rowsPipeline writes one row per region of its input (regions, comma-separated), row i
// under key <run>:row:0<i> with amount i×100 paise and attribute region, through
// Attempt.Keyed; a region "ghost" is an effect of system "ghost", which no System reverses.
func rowsPipeline(js jetstream.JetStream, keys string, db *rowsDB) app.Config {
	return app.Config{
		JS: js, KeysDir: keys, Heartbeat: 200 * time.Millisecond, Lease: time.Second, TakeoverGap: 100 * time.Millisecond, AckWait: 3 * time.Second,
		Pipeline: pipeline.Definition{Name: "rows", Input: []string{"regions"}, Steps: []pipeline.Step{
			{Name: "post", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Effects: "rows of the rows table",
				Key: "<run>:row:<n>, the table's primary key; fenced", Compensation: "reversal row <key>:rev, the negated amount",
				Recovery: "written again under the same keys"},
		}},
		Steps:   map[string]runner.Step{"post": postRows{db}},
		Systems: map[string]undo.System{"rows": rowsSystem{db}},
	}
}

// postRows is rowsPipeline's step.
type postRows struct{ db *rowsDB }

// RaiseFences raises the run's fence in the rows table to the step's token.
func (p postRows) RaiseFences(ctx context.Context, _ *runner.Attempt, t fence.Token) error {
	return fence.Hold(ctx, p.db.db, fence.SQLite, "fences", t)
}

// Verify checks that the rows table holds a row for every region of the run.
func (p postRows) Verify(ctx context.Context, a *runner.Attempt, _ *runner.Result) error {
	var n int
	if err := p.db.db.QueryRowContext(ctx, `SELECT count(*) FROM rows WHERE run_id = ?`, a.RunID).Scan(&n); err != nil {
		return err
	}
	if want := len(strings.Split(a.Params.String("regions"), ",")); n != want {
		return fmt.Errorf("%d rows of run %s stored, want %d", n, a.RunID, want)
	}
	return nil
}

func (p postRows) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	db := p.db
	regions := strings.Split(a.Params.String("regions"), ",")
	effs := make([]runner.Effect, len(regions))
	for i, region := range regions {
		key := fmt.Sprintf("%s:row:%02d", a.RunID, i+1)
		system := "rows"
		if region == "ghost" {
			system = "ghost"
		}
		payload, _ := json.Marshal(map[string]any{"amount": (i + 1) * 100})
		effs[i] = runner.Effect{Key: key, Attrs: map[string]string{"region": region}, Payload: json.RawMessage(payload),
			Reverse: &saga.Reverse{System: system, Key: key + ":rev", Payload: payload}}
	}
	err := a.Keyed(ctx, effs, func(ctx context.Context, i int) (*saga.Receipt, error) {
		return nil, db.write(ctx, a.Token, effs[i].Key, regions[i], int64((i+1)*100))
	})
	if err != nil {
		return nil, err
	}
	return output(len(effs)), nil
}

// A hosted pipeline's undo reverses its effects through the System it registered: a scoped
// undo only the effects its attributes select, the run back to done; a whole undo the rest,
// newest first, the run undone; a compensator stopped mid-undo is resumed by the next one
// from its cursor, with no reversal made twice; and an effect of a system with no System
// hands the run over naming it, with nothing reversed.
func TestUndoThroughRegisteredSystems(t *testing.T) {
	dir := t.TempDir()
	js := natsFor(t)
	db := openRows(t, filepath.Join(dir, "rows.db"))
	cfg := rowsPipeline(js, filepath.Join(dir, "keys"), db)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if !slices.Contains(cfg.Services(), app.Compensator) {
		t.Fatalf("services %v: no %s", cfg.Services(), app.Compensator)
	}
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, js, assets.MustSpace("rows").Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	// The step and the supervisor in one process; the compensator alone in another, started
	// and stopped by the test.
	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := app.Run(running, cfg, "post", app.Supervisor)
		if err != nil {
			cancel() // the waits below end at once
		}
		done <- err
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	compensator := func(faults *faults.Set) (stop func()) {
		c := cfg
		c.Faults = faults
		cctx, cstop := context.WithCancel(ctx)
		cdone := make(chan error, 1)
		go func() {
			err := app.Run(cctx, c, app.Compensator)
			if err != nil {
				cancel()
			}
			cdone <- err
		}()
		return func() {
			cstop()
			if err := <-cdone; err != nil {
				t.Errorf("compensator: %v", err)
			}
		}
	}
	finish := func(run, regions string) {
		t.Helper()
		if err := app.Start(ctx, js, "rows", run, map[string]any{"regions": regions}); err != nil {
			t.Fatal(err)
		}
		rec, err := app.Wait(ctx, js, "rows", run)
		if err != nil || rec.Status != kc.Done {
			t.Fatalf("%s: %+v, %v; want done", run, rec, err)
		}
	}
	askUndo := func(run, id string, where map[string]string) {
		t.Helper()
		var cmd events.Command
		if where != nil {
			cmd.Scope = &events.UndoScope{Where: where}
		}
		if err := app.Command(ctx, js, "rows", run, events.VerbUndo, id, cmd); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(run, id string, status kc.Status) *kc.Record {
		t.Helper()
		return waitRecord(ctx, t, store, run, "settled undo "+id+" as "+string(status), func(r *kc.Record) bool {
			return r.Undo != nil && r.Undo.RequestID == kc.RequestKey(id) && r.Status == status && r.Lease == nil
		})
	}

	finish("r-1", "north,south,north,south,north,south")
	if n := db.count(t, "r-1"); n != 6 {
		t.Fatalf("r-1 wrote %d rows, want 6", n)
	}
	stopComp := compensator(nil)

	// (a) --where region=north: the north rows only, newest first; the run stays done.
	askUndo("r-1", "undo-north", map[string]string{"region": "north"})
	rec := settled("r-1", "undo-north", kc.Done)
	if got, want := db.received(t, "r-1"), []string{"row:05:rev", "row:03:rev", "row:01:rev"}; !slices.Equal(got, want) {
		t.Errorf("scoped undo: the system received %v, want %v", got, want)
	}
	if got := db.reversed(t, "r-1"); len(got) != 3 || got["row:01"] != -100 || got["row:03"] != -300 || got["row:05"] != -500 {
		t.Errorf("scoped undo: reversals %v, want row:01 -100, row:03 -300, row:05 -500 and no south row", got)
	}
	if rec.Undo.Total != 3 || rec.Undo.Reversed != 3 || rec.Undo.Cursor != 3 {
		t.Errorf("scoped undo: %+v, want 3 of 3 reversed", rec.Undo)
	}

	// (b) The whole run: every effect newest first; the north ones are found reversed.
	askUndo("r-1", "undo-all", nil)
	rec = settled("r-1", "undo-all", kc.Undone)
	want := []string{"row:05:rev", "row:03:rev", "row:01:rev",
		"row:06:rev", "row:05:rev=", "row:04:rev", "row:03:rev=", "row:02:rev", "row:01:rev="}
	if got := db.received(t, "r-1"); !slices.Equal(got, want) {
		t.Errorf("whole undo: the system received %v, want %v", got, want)
	}
	if got := db.reversed(t, "r-1"); len(got) != 6 || got["row:02"] != -200 || got["row:04"] != -400 || got["row:06"] != -600 {
		t.Errorf("whole undo: reversals %v, want all six", got)
	}
	if rec.Undo.Total != 6 || rec.Undo.Reversed != 3 || rec.Undo.Cursor != 6 {
		t.Errorf("whole undo: %+v, want 6 effects, 3 newly reversed", rec.Undo)
	}
	stopComp()

	// (c) A compensator stopped after its second reversal, before its cursor moved: the next
	// one resumes from the cursor; no reversal is made twice.
	finish("r-2", "north,south,north,south")
	set, err := faults.Parse("undo.after-write.2=stall@once", filepath.Join(dir, "faults"))
	if err != nil {
		t.Fatal(err)
	}
	stopComp = compensator(set)
	askUndo("r-2", "undo-r2", nil)
	deadline := time.NewTicker(20 * time.Millisecond)
	for len(db.received(t, "r-2")) < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("r-2's undo never reached its second reversal: %v", db.received(t, "r-2"))
		case <-deadline.C:
		}
	}
	deadline.Stop()
	stopComp()
	if !faults.Fired(filepath.Join(dir, "faults"), "undo.after-write.2=stall@once") {
		t.Fatal("the stall never fired")
	}
	mid, _, err := store.Load(ctx, "r-2")
	if err != nil || mid.Status != kc.Undoing || mid.Undo == nil || mid.Undo.Cursor > 2 {
		t.Fatalf("r-2 after the stop: %+v, %v; want undoing", mid, err)
	}
	if got := db.received(t, "r-2"); !slices.Equal(got, []string{"row:04:rev", "row:03:rev"}) {
		t.Fatalf("before the stop the system received %v, want row:04:rev, row:03:rev", got)
	}
	t.Logf("r-2 stopped with its cursor at %d", mid.Undo.Cursor)
	stopComp = compensator(nil)
	rec = settled("r-2", "undo-r2", kc.Undone)
	got := db.received(t, "r-2")
	// The first reversal is never asked again (the cursor passed it); the second is asked
	// again only if the cursor had not moved past it, and then found made.
	want = []string{"row:04:rev", "row:03:rev", "row:02:rev", "row:01:rev"}
	if mid.Undo.Cursor < 2 {
		want = []string{"row:04:rev", "row:03:rev", "row:03:rev=", "row:02:rev", "row:01:rev"}
	}
	if !slices.Equal(got, want) {
		t.Errorf("resumed undo (cursor %d at the stop): the system received %v, want %v", mid.Undo.Cursor, got, want)
	}
	if rev := db.reversed(t, "r-2"); len(rev) != 4 || rev["row:01"] != -100 || rev["row:04"] != -400 {
		t.Errorf("resumed undo: reversals %v, want four, each once", rev)
	}
	if rec.Undo.Cursor != 4 || rec.Undo.Total != 4 {
		t.Errorf("resumed undo: %+v, want the cursor at 4 of 4", rec.Undo)
	}

	// (d) An effect of a system with no System: handed over, naming it, nothing reversed.
	finish("r-3", "north,ghost,south")
	askUndo("r-3", "undo-ghost", nil)
	rec = waitRecord(ctx, t, store, "r-3", "handed over", func(r *kc.Record) bool { return r.Status == kc.HandedOver && r.Lease == nil })
	if rec.Undo == nil || rec.Undo.Cursor != 0 || rec.Handover == nil || !strings.Contains(rec.NextAction, "ghost") {
		t.Errorf("r-3: undo %+v, handover %v, next action %q; want the cursor at 0 and the system ghost named", rec.Undo, rec.Handover, rec.NextAction)
	}
	if got := db.received(t, "r-3"); len(got) != 0 {
		t.Errorf("r-3: the system received %v, want nothing", got)
	}
	hv, err := js.KeyValue(ctx, assets.MustSpace("rows").Bucket(assets.BucketHandovers))
	if err != nil {
		t.Fatal(err)
	}
	e, err := hv.Get(ctx, "r-3")
	if err != nil {
		t.Fatal(err)
	}
	var note runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &note); err != nil || note.ID != *rec.Handover || note.Step != undo.Step ||
		!strings.Contains(note.Error, `ghost`) || !strings.Contains(note.Error, "r-3:row:02") {
		t.Errorf("r-3's handover note %+v (%v): want it to name system ghost and key r-3:row:02", note, err)
	}

	// (e) A reversal the system refuses for good: handed over at once, naming the effect,
	// the cursor kept after the reversals made before it.
	finish("r-4", "north,locked,south")
	askUndo("r-4", "undo-locked", nil)
	rec = waitRecord(ctx, t, store, "r-4", "handed over", func(r *kc.Record) bool { return r.Status == kc.HandedOver && r.Lease == nil })
	if rec.Undo == nil || rec.Undo.Cursor != 1 || !strings.Contains(rec.NextAction, "r-4:row:02") {
		t.Errorf("r-4: undo %+v, next action %q; want the cursor at 1 (south reversed) and the locked row named", rec.Undo, rec.NextAction)
	}
	if got := db.received(t, "r-4"); !slices.Equal(got, []string{"row:03:rev"}) {
		t.Errorf("r-4: the system received %v, want only the south row's reversal", got)
	}
	stopComp()
}

// A pipeline without Systems has no compensator; a nil System and a step named after the
// compensator are refused, naming them.
func TestSystemsConfigRefused(t *testing.T) {
	js := natsFor(t)
	ctx := t.Context()
	cfg := rowsPipeline(js, t.TempDir(), nil)
	cfg.Systems = nil
	if slices.Contains(cfg.Services(), app.Compensator) {
		t.Errorf("services %v of a pipeline without Systems name the compensator", cfg.Services())
	}
	if err := app.Run(ctx, cfg, app.Compensator); err == nil || !strings.Contains(err.Error(), `no service "compensator"`) {
		t.Errorf("Run of the compensator of a pipeline without Systems: %v", err)
	}
	cfg.Systems = map[string]undo.System{"rows": nil}
	if err := app.Init(ctx, cfg); err == nil || !strings.Contains(err.Error(), `system "rows"`) {
		t.Errorf("Init with a nil System: %v", err)
	}
	cfg = rowsPipeline(js, t.TempDir(), nil)
	cfg.Pipeline.Steps[0].Name = app.Compensator
	cfg.Steps = map[string]runner.Step{app.Compensator: cfg.Steps["post"]}
	if err := app.Init(ctx, cfg); err == nil || !strings.Contains(err.Error(), `step "compensator" has the name of a service`) {
		t.Errorf("Init with a step named compensator: %v", err)
	}
}

// The pipeline's compensator, connected as the pipeline's own NATS user (its
// assets.Permissions), undoes a run with no permissions violation: its durable, saga,
// timeline and checkpoints are all in the pipeline's space.
func TestUndoPermissions(t *testing.T) {
	dir := t.TempDir()
	perm := rowsPipeline(nil, "", nil).Assets().Permissions()
	un := startUsersNATS(t, map[string]assets.Permissions{"rows": perm})
	admin, own := un.connect("admin"), un.connect("rows")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	db := openRows(t, filepath.Join(dir, "rows.db"))
	keys := filepath.Join(dir, "keys")
	if err := app.Init(ctx, rowsPipeline(admin, keys, db)); err != nil {
		t.Fatal(err)
	}
	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := app.Run(running, rowsPipeline(own, keys, db))
		if err != nil {
			cancel()
		}
		done <- err
	}()
	if err := app.Start(ctx, admin, "rows", "r-1", map[string]any{"regions": "north,south"}); err != nil {
		t.Fatal(err)
	}
	if rec, err := app.Wait(ctx, admin, "rows", "r-1"); err != nil || rec.Status != kc.Done {
		t.Fatalf("r-1: %+v, %v; want done", rec, err)
	}
	if err := app.Command(ctx, admin, "rows", "r-1", events.VerbUndo, "undo-1", events.Command{}); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, admin, assets.MustSpace("rows").Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	waitRecord(ctx, t, store, "r-1", "undone", func(r *kc.Record) bool { return r.Status == kc.Undone && r.Lease == nil })
	if got := db.received(t, "r-1"); !slices.Equal(got, []string{"row:02:rev", "row:01:rev"}) {
		t.Errorf("the system received %v, want row:02:rev, row:01:rev", got)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := un.violations(false); len(v) > 0 {
		t.Errorf("the pipeline's services were refused: %v", v)
	}
}

// slowRows is rowsSystem with a first reversal that lasts longer than the lease: it returns
// only once it has seen the compensator's lease renewed `beats` times under the same token
// (a heartbeat), and fails the moment the lease is another's or gone (the supervisor took it
// as expired).
type slowRows struct {
	rowsSystem
	store  *kc.Store
	beats  int
	slow   chan struct{} // closed by the first reversal
	tokens chan uint64   // the token of every reversal asked for
	lost   chan error    // the first reversal's lease lost
}

func (s slowRows) Reverse(ctx context.Context, t fence.Token, rec *kc.Record, e saga.Effect) (bool, error) {
	s.tokens <- t.Value
	select {
	case <-s.slow:
		return s.rowsSystem.Reverse(ctx, t, rec, e)
	default:
		close(s.slow)
	}
	seen := map[string]bool{}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(seen) <= s.beats {
		cur, _, err := s.store.Load(ctx, rec.RunID)
		if err != nil {
			return false, err
		}
		if cur.Lease == nil || cur.Lease.Token != t.Value {
			err := fmt.Errorf("the undo's lease %+v is no longer token %d's after %d beats: it expired mid-reversal", cur.Lease, t.Value, len(seen)-1)
			s.lost <- err
			return false, err
		}
		seen[cur.Lease.WriteID] = true
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick.C:
		}
	}
	return s.rowsSystem.Reverse(ctx, t, rec, e)
}

// A reversal that outlasts the lease (CAIRN_LEASE) keeps it by the compensator's heartbeat:
// the supervisor, which releases a lease left unchanged for the lease's length, leaves it, and
// the undo ends under the one token, each reversal made once.
func TestLongReversalKeepsTheLease(t *testing.T) {
	dir := t.TempDir()
	js := natsFor(t)
	db := openRows(t, filepath.Join(dir, "rows.db"))
	cfg := rowsPipeline(js, filepath.Join(dir, "keys"), db)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	store, err := kc.Open(ctx, js, assets.MustSpace("rows").Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	// Lease 1 s, heartbeat 200 ms: 8 beats is 1.6 s, past the lease.
	slow := slowRows{rowsSystem: rowsSystem{db}, store: store, beats: 8, slow: make(chan struct{}), tokens: make(chan uint64, 16), lost: make(chan error, 1)}
	cfg.Systems = map[string]undo.System{"rows": slow}
	running, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := app.Run(running, cfg, "post", app.Supervisor, app.Compensator)
		if err != nil {
			cancel()
		}
		done <- err
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	if err := app.Start(ctx, js, "rows", "r-1", map[string]any{"regions": "north,south,north"}); err != nil {
		t.Fatal(err)
	}
	if rec, err := app.Wait(ctx, js, "rows", "r-1"); err != nil || rec.Status != kc.Done {
		t.Fatalf("r-1: %+v, %v; want done", rec, err)
	}
	if err := app.Command(ctx, js, "rows", "r-1", events.VerbUndo, "undo-all", events.Command{}); err != nil {
		t.Fatal(err)
	}
	rec := waitRecord(ctx, t, store, "r-1", "undone or handed over", func(r *kc.Record) bool {
		return (r.Status == kc.Undone || r.Status == kc.HandedOver) && r.Lease == nil
	})
	if rec.Status != kc.Undone || rec.Undo == nil || rec.Undo.Reversed != 3 {
		t.Fatalf("r-1: status %s, undo %+v, next action %q; want undone with 3 reversed", rec.Status, rec.Undo, rec.NextAction)
	}
	if got, want := db.received(t, "r-1"), []string{"row:03:rev", "row:02:rev", "row:01:rev"}; !slices.Equal(got, want) {
		t.Errorf("the system received %v, want %v: each reversal once", got, want)
	}
	select {
	case err := <-slow.lost:
		t.Errorf("the long reversal: %v", err)
	default:
	}
	close(slow.tokens)
	var tokens []uint64
	for tok := range slow.tokens {
		tokens = append(tokens, tok)
	}
	if len(tokens) != 3 || tokens[0] != tokens[1] || tokens[1] != tokens[2] {
		t.Errorf("reversals asked under tokens %v, want 3 under one token: no takeover", tokens)
	}
}
