package stubapi

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
	"strconv"
	"strings"

	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/pkg/httpidem"
)

// openDB opens the upload system's SQLite file (WAL, busy timeout, as pkg/httpidem
// asks) and creates its tables: uploads and the idempotency store's.
func openDB(path string) (*sql.DB, error) {
	// Readable by this process's user only: SQLite makes the file, and its -wal and -shm
	// beside it, with the first file's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	if err := errors.Join(f.Chmod(0o600), f.Close()); err != nil {
		return nil, fmt.Errorf("making %s private: %w", path, err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS uploads(
		seq INTEGER PRIMARY KEY,
		record_id TEXT NOT NULL,
		body TEXT NOT NULL,
		idem_key TEXT,
		run_id TEXT,
		token INTEGER)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating the uploads table in %s: %w", path, err)
	}
	// A reversal per upload at most (upload_seq is unique): a second one, under any key, is
	// answered with the first.
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS reversals(
		seq INTEGER PRIMARY KEY,
		upload_seq INTEGER NOT NULL UNIQUE REFERENCES uploads(seq),
		idem_key TEXT,
		run_id TEXT,
		token INTEGER)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating the reversals table in %s: %w", path, err)
	}
	if err := httpidem.NewSQLiteStore(db).CreateTables(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("in %s: %w", path, err)
	}
	return db, nil
}

// Row is one row of the uploads table, as GET /v1/uploads lists it.
type Row struct {
	Seq      int64  `json:"seq"`
	RecordID string `json:"record_id"`
	Body     string `json:"body"`
	IdemKey  string `json:"idem_key,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	Token    int64  `json:"token,omitempty"`
	// Reversed says the upload was reversed (POST /v1/uploads/{key}/reversal), by the
	// reversal ReversalSeq; the row stays, marked.
	Reversed    bool  `json:"reversed"`
	ReversalSeq int64 `json:"reversal_seq,omitempty"`
}

// TypeNotUploaded is the problem type of a reversal of a key never uploaded (404).
const TypeNotUploaded = "https://github.com/cairnhq/cairn/blob/main/examples/enrich/stubapi/upload.go#not-uploaded"

// TypeReversalMismatch is the problem type of a reversal whose body names another record
// than the upload of its key (409).
const TypeReversalMismatch = "https://github.com/cairnhq/cairn/blob/main/examples/enrich/stubapi/upload.go#reversal-mismatch"

// Reversal is the body of POST /v1/uploads/{key}/reversal: the record the upload of key
// holds, checked against it.
type Reversal struct {
	ID string `json:"id"`
}

// ReversalPath is the path of the reversal of the upload made under idempotency key key.
func ReversalPath(key string) string { return "/v1/uploads/" + url.PathEscape(key) + "/reversal" }

// uploadHandler is the upload system: POST /v1/uploads through the idempotency
// middleware (counted, and its fenced answers counted), POST /v1/uploads/{key}/reversal
// the same way (its own key required), GET /v1/uploads listing rows.
func (a *APIs) uploadHandler() http.Handler {
	create := httpidem.New(httpidem.NewSQLiteStore(a.db)).Wrap(http.HandlerFunc(a.create))
	reverse := httpidem.New(httpidem.NewSQLiteStore(a.db), httpidem.WithKeyRequired()).Wrap(http.HandlerFunc(a.reverse))
	mux := http.NewServeMux()
	mux.Handle("POST /v1/uploads", a.counted(APIUpload, create))
	mux.Handle("POST /v1/uploads/{key}/reversal", a.counted(APIReversal, reverse))
	mux.HandleFunc("GET /v1/uploads", a.list)
	mux.HandleFunc("POST /v1/fences", a.raise)
	return mux
}

// raise answers POST /v1/fences: the run's fence (the middleware's highest token of the
// run, table http_fence_tokens) goes up to the Cairn-Fence-Token of the request, before
// the run's next worker writes anything; 204, or 409 fenced when a higher token stands.
func (a *APIs) raise(w http.ResponseWriter, r *http.Request) {
	run, token, ok, err := httpidem.ParseFence(r.Header.Get(httpidem.DefaultRunHeader), r.Header.Get(httpidem.DefaultTokenHeader))
	if err != nil || !ok {
		httpidem.Problem{Type: httpidem.TypeFenceInvalid, Title: "Fencing headers invalid", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("POST /v1/fences takes %s and %s (%v)", httpidem.DefaultRunHeader, httpidem.DefaultTokenHeader, err)}.Write(w)
		return
	}
	var highest int64
	err = a.db.QueryRowContext(context.WithoutCancel(r.Context()), `INSERT INTO http_fence_tokens(run, token) VALUES (?, ?)
		ON CONFLICT(run) DO UPDATE SET token = CASE WHEN excluded.token > http_fence_tokens.token THEN excluded.token ELSE http_fence_tokens.token END
		RETURNING token`, run, token).Scan(&highest)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "raising the fence: " + err.Error()})
		return
	}
	if highest > token {
		a.stats.add(func(s *stats) { s.fenced++ })
		httpidem.Problem{Type: httpidem.TypeFenced, Title: "Fenced", Status: http.StatusConflict,
			Detail:     fmt.Sprintf("fencing token %d of run %q is below the highest token seen for it, %d", token, run, highest),
			Extensions: map[string]any{"run": run, "token": token, "highest": highest}}.Write(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// counted counts each request to api (by the record id of its body: an upload's or a
// reversal's "id") and each fenced answer it gets.
func (a *APIs) counted(api string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, httpidem.DefaultMaxBody))
		if err != nil {
			a.stats.call(api, "")
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "reading the body: " + err.Error()})
			return
		}
		var u struct {
			ID string `json:"id"`
		}
		json.Unmarshal(body, &u) // the handler refuses a bad body; here only the id is wanted
		a.stats.call(api, u.ID)
		r.Body = io.NopCloser(bytes.NewReader(body))
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == http.StatusConflict {
			var p httpidem.Problem
			if json.Unmarshal(sw.body.Bytes(), &p) == nil && strings.HasSuffix(p.Type, "#fenced") {
				a.stats.add(func(s *stats) { s.fenced++ })
			}
		}
	})
}

// statusWriter keeps the status of an answer, and the body of a 409 (to tell a fenced
// one from one in flight).
type statusWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status == http.StatusConflict && w.body.Len() < 64<<10 {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// create stores one upload: 400 for a body that is not a records.Upload with an id,
// else a row and 201 with its Location and {"seq":n}.
func (a *APIs) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "reading the body: " + err.Error()})
		return
	}
	var u records.Upload
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the body is not an upload: " + err.Error()})
		return
	}
	if u.ID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the upload has no id"})
		return
	}
	var key, run sql.NullString
	var token sql.NullInt64
	if v := r.Header.Get(httpidem.KeyHeader); v != "" {
		k, err := httpidem.ParseKey(v) // the middleware has checked it
		if err == nil {
			key = sql.NullString{String: k, Valid: true}
		}
	}
	if rn, tk, ok, err := httpidem.ParseFence(r.Header.Get(httpidem.DefaultRunHeader), r.Header.Get(httpidem.DefaultTokenHeader)); err == nil && ok {
		run, token = sql.NullString{String: rn, Valid: true}, sql.NullInt64{Int64: tk, Valid: true}
	}
	var seq int64
	err = a.db.QueryRowContext(context.WithoutCancel(r.Context()),
		`INSERT INTO uploads(record_id, body, idem_key, run_id, token) VALUES (?, ?, ?, ?, ?) RETURNING seq`,
		u.ID, string(body), key, run, token).Scan(&seq)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "storing the upload: " + err.Error()})
		return
	}
	w.Header().Set("Location", "/v1/uploads/"+strconv.FormatInt(seq, 10))
	writeJSON(w, http.StatusCreated, map[string]int64{"seq": seq})
}

// reverse answers POST /v1/uploads/{key}/reversal: the upload made under idempotency key
// {key} is reversed (a row of reversals; the upload's row stays, marked reversed), 201 with
// {"seq":reversal,"upload_seq":upload}. The request is keyed (its own Idempotency-Key, the
// middleware's: a repeat is the stored answer) and fenced like a create. A second reversal
// of the same upload under another key reverses nothing: 200 with the first's seq and
// "existing":true. 404 (TypeNotUploaded) when no upload has the key, 409
// (TypeReversalMismatch) when the body's id is not the upload's record, 400 for a body that
// is not a Reversal with an id.
func (a *APIs) reverse(w http.ResponseWriter, r *http.Request) {
	upKey := r.PathValue("key")
	var rv Reversal
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rv); err != nil || rv.ID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("the body is not a reversal {\"id\": record id}: %v", err)})
		return
	}
	var key, run sql.NullString
	var token sql.NullInt64
	if k, err := httpidem.ParseKey(r.Header.Get(httpidem.KeyHeader)); err == nil { // the middleware has checked it
		key = sql.NullString{String: k, Valid: true}
	}
	if rn, tk, ok, err := httpidem.ParseFence(r.Header.Get(httpidem.DefaultRunHeader), r.Header.Get(httpidem.DefaultTokenHeader)); err == nil && ok {
		run, token = sql.NullString{String: rn, Valid: true}, sql.NullInt64{Int64: tk, Valid: true}
	}
	// No transaction: an upload's row is never deleted, and the insert of its reversal is one
	// statement (upload_seq unique), so two reversals of one upload make one row.
	ctx := context.WithoutCancel(r.Context())
	var upSeq int64
	var recordID string
	switch err := a.db.QueryRowContext(ctx, `SELECT seq, record_id FROM uploads WHERE idem_key = ? ORDER BY seq LIMIT 1`, upKey).Scan(&upSeq, &recordID); {
	case errors.Is(err, sql.ErrNoRows):
		httpidem.Problem{Type: TypeNotUploaded, Title: "Not uploaded", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("no upload was made under key %q: nothing to reverse", upKey), Extensions: map[string]any{"upload_key": upKey}}.Write(w)
		return
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "reversing the upload: " + err.Error()})
		return
	}
	if recordID != rv.ID {
		httpidem.Problem{Type: TypeReversalMismatch, Title: "Reversal of another record", Status: http.StatusConflict,
			Detail:     fmt.Sprintf("the upload under key %q is of record %q, the reversal names %q", upKey, recordID, rv.ID),
			Extensions: map[string]any{"upload_key": upKey, "record": recordID, "named": rv.ID}}.Write(w)
		return
	}
	var seq int64
	err := a.db.QueryRowContext(ctx, `INSERT INTO reversals(upload_seq, idem_key, run_id, token) VALUES (?, ?, ?, ?)
		ON CONFLICT(upload_seq) DO NOTHING RETURNING seq`, upSeq, key, run, token).Scan(&seq)
	existing := errors.Is(err, sql.ErrNoRows)
	if existing {
		err = a.db.QueryRowContext(ctx, `SELECT seq FROM reversals WHERE upload_seq = ?`, upSeq).Scan(&seq)
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "reversing the upload: " + err.Error()})
		return
	}
	w.Header().Set("Location", ReversalPath(upKey))
	if existing {
		writeJSON(w, http.StatusOK, map[string]any{"seq": seq, "upload_seq": upSeq, "existing": true})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"seq": seq, "upload_seq": upSeq})
}

// list answers GET /v1/uploads[?run_id=] with the rows (of that run) as a JSON array,
// in seq order.
func (a *APIs) list(w http.ResponseWriter, r *http.Request) {
	rows, err := a.Rows(r.Context(), r.URL.Query().Get("run_id"))
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, rows)
}

// Rows is the uploads table's rows in seq order: all of them when run is "", else the
// rows written with that run id.
func (a *APIs) Rows(ctx context.Context, run string) ([]Row, error) {
	q := `SELECT u.seq, u.record_id, u.body, COALESCE(u.idem_key, ''), COALESCE(u.run_id, ''), COALESCE(u.token, 0), COALESCE(r.seq, 0)
		FROM uploads u LEFT JOIN reversals r ON r.upload_seq = u.seq`
	var args []any
	if run != "" {
		q += ` WHERE u.run_id = ?`
		args = append(args, run)
	}
	rows, err := a.db.QueryContext(ctx, q+` ORDER BY u.seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing uploads: %w", err)
	}
	defer rows.Close()
	out := []Row{}
	for rows.Next() {
		var x Row
		if err := rows.Scan(&x.Seq, &x.RecordID, &x.Body, &x.IdemKey, &x.RunID, &x.Token, &x.ReversalSeq); err != nil {
			return nil, fmt.Errorf("listing uploads: %w", err)
		}
		x.Reversed = x.ReversalSeq != 0
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing uploads: %w", err)
	}
	return out, nil
}
