package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/devproc"
	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/ledgerapi"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/identity"
)

// ledgerAPI is one services/ledger-api process and its address.
type ledgerAPI struct {
	t       *testing.T
	url     string
	metrics string // where it serves /metrics
	proc    *devproc.Proc
	signer  *identity.Signer // post-ledger's, which the tests' requests are signed with
}

// ledgerAPIKeys is a NATS server whose cairn-keys holds post-ledger's key, for a ledger-api
// with no night: the CAIRN_NATS_URL setting that reaches it, and post-ledger's signer.
func ledgerAPIKeys(t *testing.T) (string, *identity.Signer) {
	t.Helper()
	js := natstest.JetStream(t)
	return "CAIRN_NATS_URL=" + js.Conn().ConnectedUrl(), apptest.Keys(t, js, ledgerapi.CallerPostLedger)
}

// startLedgerAPI starts the ledger-api binary with env and waits for its "ready". It serves
// on addr, or where the kernel chooses if addr is anyAddr (see anyPort).
func startLedgerAPI(t *testing.T, addr string, env ...string) *ledgerAPI {
	t.Helper()
	log := filepath.Join(t.TempDir(), "ledger-api.log")
	env = append(append(os.Environ(), "CAIRN_LEDGER_API_ADDR="+addr, anyPort), env...)
	bin, args := serviceCmd("ledger-api")
	p, err := devproc.StartArgs(bin, args, env, log, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(30 * time.Second) })
	metrics, err := metricsOf(p)
	if err != nil {
		t.Fatal(err)
	}
	if addr, err = servedAt(p, "serving the ledger"); err != nil {
		t.Fatal(err)
	}
	return &ledgerAPI{t: t, url: "http://" + addr, metrics: metrics, proc: p}
}

// keysRead waits until the service is ready: its database open and its callers' keys read
// (it answers 503 before).
func (l *ledgerAPI) keysRead() {
	l.t.Helper()
	// The service reads the keys right after it serves.
	eventually.That(l.t, time.Minute, "ledger-api ready", func() error {
		resp, err := http.Get("http://" + l.metrics + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answers %d", resp.StatusCode)
		}
		return nil
	})
}

// post sends one entry under key with the run's token 1, and returns the status and body.
func (l *ledgerAPI) post(key string, e books.Entry) (int, []byte, http.Header) {
	l.t.Helper()
	body, err := json.Marshal(map[string]any{"run_id": e.RunID, "invoice_no": e.InvoiceNo, "line": e.Line, "kind": e.Kind,
		"supplier_id": e.SupplierID, "amount_paise": e.AmountPaise, "reverses": nullable(e.Reverses), "created_at": e.CreatedAt})
	if err != nil {
		l.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, l.url+"/v1/entries", bytes.NewReader(body))
	if err != nil {
		l.t.Fatal(err)
	}
	k, err := httpidem.FormatKey(key)
	if err != nil {
		l.t.Fatal(err)
	}
	req.Header.Set(httpidem.KeyHeader, k)
	req.Header.Set(httpidem.DefaultRunHeader, e.RunID)
	req.Header.Set(httpidem.DefaultTokenHeader, "1")
	httpidem.Sign(req, body, l.signer, time.Now(), ledgerapi.EpochHeader)
	return l.do(req)
}

func (l *ledgerAPI) get(key string) (int, []byte) {
	l.t.Helper()
	req, err := http.NewRequest(http.MethodGet, l.url+"/v1/entries/"+url.PathEscape(key), nil)
	if err != nil {
		l.t.Fatal(err)
	}
	httpidem.Sign(req, nil, l.signer, time.Now(), ledgerapi.EpochHeader)
	status, body, _ := l.do(req)
	return status, body
}

func (l *ledgerAPI) do(req *http.Request) (int, []byte, http.Header) {
	l.t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		l.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		l.t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ledgerAPIEntries is what the tests post: four lines of two invoices and the reversal
// of one.
func ledgerAPIEntries(run string) []books.Entry {
	var out []books.Entry
	for i, amount := range []int64{125000, 9900, 430000, 77} {
		inv := fmt.Sprintf("INV-%d", 1+i/2)
		out = append(out, books.Entry{Key: fmt.Sprintf("%s:%s:%d", run, inv, 1+i%2), RunID: run, InvoiceNo: inv, Line: 1 + i%2,
			Kind: "payable", SupplierID: "SUP-7", AmountPaise: amount, CreatedAt: "2026-12-01T22:00:00Z"})
	}
	rev := out[1]
	rev.Reverses, rev.Key, rev.AmountPaise = rev.Key, rev.Key+":rev", -rev.AmountPaise
	return append(out, rev)
}

// postAll posts every entry, each twice (the second a replay), and checks the answers.
func (l *ledgerAPI) postAll(entries []books.Entry, wantFirst int) {
	l.t.Helper()
	for _, e := range entries {
		status, first, _ := l.post(e.Key, e)
		if status != wantFirst {
			l.t.Fatalf("POST %s: %d %s, want %d", e.Key, status, first, wantFirst)
		}
		status, again, h := l.post(e.Key, e)
		if status != wantFirst || !bytes.Equal(first, again) || h.Get(httpidem.ReplayedHeader) != "true" {
			l.t.Fatalf("repeat of %s: %d %s (replayed %q), want the first answer %s replayed", e.Key, status, again, h.Get(httpidem.ReplayedHeader), first)
		}
	}
}

// checkLedger reads ledger_entries with SQL and wants exactly entries.
func checkLedger(t *testing.T, db *sql.DB, entries []books.Entry) {
	t.Helper()
	rows, err := db.Query(`SELECT key, run_id, invoice_no, line, kind, supplier_id, amount_paise, COALESCE(reverses, ''), created_at FROM ledger_entries ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]books.Entry{}
	for rows.Next() {
		var e books.Entry
		if err := rows.Scan(&e.Key, &e.RunID, &e.InvoiceNo, &e.Line, &e.Kind, &e.SupplierID, &e.AmountPaise, &e.Reverses, &e.CreatedAt); err != nil {
			t.Fatal(err)
		}
		got[e.Key] = e
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(entries) {
		t.Fatalf("ledger_entries holds %d rows, want the %d posted: %v", len(got), len(entries), got)
	}
	for _, e := range entries {
		if got[e.Key] != e {
			t.Fatalf("row %s is %+v, want %+v", e.Key, got[e.Key], e)
		}
	}
}

// The ledger-api process on a SQLite file: entries posted over HTTP are the rows of
// ledger_entries, once each; the answers are replayed after the process is killed and
// started again on the same file; a GET reads them back; a wrong reversal is 422.
func TestLedgerAPIProcess(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "ledger.db")
	natsURL, sg := ledgerAPIKeys(t)
	l := startLedgerAPI(t, anyAddr, "CAIRN_DATA_DIR="+dir, "CAIRN_LEDGER_DSN="+dsn, natsURL)
	l.signer = sg
	l.keysRead()
	addr := strings.TrimPrefix(l.url, "http://")
	entries := ledgerAPIEntries("run-e2e")
	l.postAll(entries, http.StatusCreated)

	// Killed, not stopped: the keys and answers are in the file, not in the process.
	l.proc.Kill()
	l = startLedgerAPI(t, addr, "CAIRN_DATA_DIR="+dir, "CAIRN_LEDGER_DSN="+dsn, natsURL)
	l.signer = sg
	l.keysRead()
	for _, e := range entries {
		status, body, h := l.post(e.Key, e)
		if status != http.StatusCreated || h.Get(httpidem.ReplayedHeader) != "true" {
			t.Fatalf("POST %s after a restart: %d %s, replayed %q; want the stored 201", e.Key, status, body, h.Get(httpidem.ReplayedHeader))
		}
	}
	bad := entries[0]
	bad.Key, bad.Reverses, bad.AmountPaise = bad.Key+":rev", bad.Key, -1
	status, body, h := l.post(bad.Key, bad)
	var p httpidem.Problem
	if status != http.StatusUnprocessableEntity || h.Get("Content-Type") != httpidem.ContentTypeProblem || json.Unmarshal(body, &p) != nil ||
		p.Extensions["ledger_error"] != books.ErrNotNegation.Error() {
		t.Fatalf("a reversal that is not the negation: %d %s, want a 422 problem naming %q", status, body, books.ErrNotNegation)
	}
	status, body = l.get(entries[4].Key)
	var got map[string]any
	if status != http.StatusOK || json.Unmarshal(body, &got) != nil || got["reverses"] != entries[4].Reverses || got["amount_paise"] != float64(entries[4].AmountPaise) {
		t.Fatalf("GET %s: %d %s", entries[4].Key, status, body)
	}
	if status, body = l.get("no-such-key"); status != http.StatusNotFound {
		t.Fatalf("GET of an absent key: %d %s", status, body)
	}

	// Ready while its database answers; every answer counted.
	resp, err := http.Get("http://" + l.metrics + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %s", resp.Status)
	}
	m, err := scrape(l.metrics)
	if err != nil {
		t.Fatal(err)
	}
	if got := m[`cairn_ledger_api_requests_total{code="201",method="POST"}`]; got != float64(len(entries)) {
		t.Fatalf("cairn_ledger_api_requests_total of 201 POSTs after the restart: %v, want %d", got, len(entries))
	}
	if got := m[`cairn_ledger_api_requests_total{code="422",method="POST"}`]; got != 1 {
		t.Fatalf("cairn_ledger_api_requests_total of 422 POSTs: %v, want 1", got)
	}

	db, err := sql.Open("sqlite", filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkLedger(t, db, entries)
}

// A CAIRN_LEDGER_API_ADDR that is not HOST:PORT, or that another process holds, stops
// the service at start with exit 2, naming the variable, and it is never ready.
func TestLedgerAPIBadAddr(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	natsURL, _ := ledgerAPIKeys(t)
	held := strings.TrimPrefix(startLedgerAPI(t, anyAddr, "CAIRN_DATA_DIR="+t.TempDir(), natsURL).url, "http://")
	for _, addr := range []string{"localhost", "127.0.0.1:port", held} {
		t.Run(addr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			bin, args := serviceCmd("ledger-api")
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = append(os.Environ(), "CAIRN_LEDGER_API_ADDR="+addr, "CAIRN_DATA_DIR="+t.TempDir(), natsURL)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("ledger-api with CAIRN_LEDGER_API_ADDR=%s: %v, want exit 2\nstderr: %s", addr, err, stderr.String())
			}
			if strings.Contains(stdout.String(), "ready") {
				t.Errorf("ready with a bad address: %q", stdout.String())
			}
			if !strings.Contains(stderr.String(), "CAIRN_LEDGER_API_ADDR") {
				t.Errorf("the error does not name CAIRN_LEDGER_API_ADDR: %s", stderr.String())
			}
		})
	}
}

// On PostgreSQL as the role ledger_api of deploy/postgres/roles, after the owner made the
// tables (as `cairn init --tables` does) and the grants were applied: the entries land,
// once each, and the role may do nothing else to the ledger.
func TestLedgerAPIPostgresRole(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	ownerDSN, owner := pgDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := books.Open(ctx, ownerDSN)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerapi.CreateTables(ctx, db); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, f := range []string{"roles.sql", "ledger.sql"} {
		b, err := os.ReadFile(filepath.Join(deployDir, "postgres", "roles", f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := owner.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	pw := "e2e-ledger-api-" + filepath.Base(t.TempDir())
	if _, err := owner.Exec(`ALTER ROLE ledger_api PASSWORD '` + pw + `'`); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(ownerDSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("ledger_api", pw)
	roleDSN := u.String()

	natsURL, sg := ledgerAPIKeys(t)
	l := startLedgerAPI(t, anyAddr, "CAIRN_DATA_DIR="+t.TempDir(), "CAIRN_LEDGER_DSN="+roleDSN, natsURL)
	l.signer = sg
	l.keysRead()
	entries := ledgerAPIEntries("run-pg")
	l.postAll(entries, http.StatusCreated)
	checkLedger(t, owner, entries)

	role, err := sql.Open("pgx", roleDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer role.Close()
	for _, stmt := range []string{
		`DELETE FROM ledger_entries`,
		`UPDATE ledger_entries SET amount_paise = 0`,
		`DELETE FROM shadow_ledger_entries`, // the shadow runs' ledger: written as the live one, never changed
		`INSERT INTO stock_adjustments(key, run_id, warehouse, sku, supplier_id, qty_delta, value_delta_paise, reason, created_at) VALUES ('forged', 'r', 'w', 's', 'x', 1, 1, 'forged', 'now')`,
		`CREATE TABLE forged(x int)`,
	} {
		_, err := role.Exec(stmt)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "42501" {
			t.Errorf("as ledger_api: %s: %v, want PostgreSQL's permission denied (42501)", stmt, err)
		}
	}
}
