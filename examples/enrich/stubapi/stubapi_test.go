package stubapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
	"github.com/cairnhq/cairn/pkg/httpidem"
)

func start(t *testing.T, c stubapi.Config) *stubapi.APIs {
	t.Helper()
	if c.Dir == "" {
		c.Dir = t.TempDir()
	}
	a, err := stubapi.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func client(a *stubapi.APIs) records.Client {
	return records.Client{ProfileURL: a.ProfileURL, GeoURL: a.GeoURL, RiskURL: a.RiskURL}
}

func TestEnrichmentsAreDeterministic(t *testing.T) {
	a := start(t, stubapi.Config{ProfileDelay: time.Millisecond})
	c := client(a)
	ctx := context.Background()
	p, raw, err := c.Profile(ctx, "rec-0003")
	if err != nil {
		t.Fatal(err)
	}
	if p.Segment != stubapi.ProfileOf("rec-0003") {
		t.Fatalf("segment %q, want %q", p.Segment, stubapi.ProfileOf("rec-0003"))
	}
	if again, err := records.ParseProfile(raw); err != nil || again != p {
		t.Fatalf("ParseProfile of the raw body: %+v, %v", again, err)
	}
	g, _, err := c.Geo(ctx, "rec-0003")
	region, tz := stubapi.GeoOf("rec-0003")
	if err != nil || g.Region != region || g.Timezone != tz {
		t.Fatalf("geo %+v, %v; want %s %s", g, err, region, tz)
	}
	r, _, err := c.Risk(ctx, "rec-0003")
	if err != nil || r.Score != stubapi.RiskOf("rec-0003") || r.Score < 0 || r.Score > 100 {
		t.Fatalf("risk %+v, %v; want %d", r, err, stubapi.RiskOf("rec-0003"))
	}
	_, _, err = c.Risk(ctx, "nope")
	var se *records.ServerError
	if !errors.As(err, &se) || se.Status != http.StatusBadRequest || records.IsTemporary(err) {
		t.Fatalf("bad id: %v, want a 400 that is not temporary", err)
	}
	got := a.Counts()
	if got.Calls["risk"] != 2 || got.PerRecord["risk"]["rec-0003"] != 1 || got.PerRecord["profile"]["rec-0003"] != 1 {
		t.Fatalf("counts %+v", got)
	}
}

func TestProfileIsSlow(t *testing.T) {
	const delay = 150 * time.Millisecond
	a := start(t, stubapi.Config{ProfileDelay: delay})
	began := time.Now()
	if _, _, err := client(a).Profile(context.Background(), "rec-0001"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < delay {
		t.Fatalf("the call took %s, less than the delay %s", took, delay)
	}
}

func TestGeoRateLimit(t *testing.T) {
	const rate = 5
	a := start(t, stubapi.Config{GeoRate: rate})
	c := client(a)
	tooMany := 0
	for i := 0; i < rate+5; i++ {
		_, _, err := c.Geo(context.Background(), records.FormatID(i+1, 4))
		var tm *records.TooManyError
		switch {
		case errors.As(err, &tm):
			if tm.RetryAfter != time.Second || tm.API != "geo" || !records.IsTemporary(err) {
				t.Fatalf("429: %+v", tm)
			}
			tooMany++
		case err != nil:
			t.Fatal(err)
		}
	}
	// Quick calls fall in one or two windows: at least one of them is past the rate.
	if tooMany < 1 {
		t.Fatalf("no 429 among %d quick calls at %d a second", rate+5, rate)
	}
	got := a.Counts()
	if got.TooMany != tooMany || got.Calls["geo"] != rate+5 {
		t.Fatalf("TooMany %d, calls %d; the client saw %d 429s of %d calls", got.TooMany, got.Calls["geo"], tooMany, rate+5)
	}
}

func TestRiskHangs(t *testing.T) {
	a := start(t, stubapi.Config{Hang: map[string]int{"rec-0007": 1}})
	c := records.Client{RiskURL: a.RiskURL, HTTP: &http.Client{Timeout: 200 * time.Millisecond}}
	_, _, err := c.Risk(context.Background(), "rec-0007")
	if err == nil || !records.IsTemporary(err) || !strings.HasPrefix(err.Error(), "risk API: GET /v1/risk/rec-0007: ") {
		t.Fatalf("hung call: %v, want a temporary timeout naming the API and path", err)
	}
	if got := a.Counts().Hung; got != 1 {
		t.Fatalf("Hung %d, want 1", got)
	}
	began := time.Now()
	r, _, err := c.Risk(context.Background(), "rec-0007")
	if err != nil || r.Score != stubapi.RiskOf("rec-0007") {
		t.Fatalf("second call: %+v, %v", r, err)
	}
	if took := time.Since(began); took >= 200*time.Millisecond {
		t.Fatalf("the second call took %s", took)
	}
	got := a.Counts()
	if got.Hung != 1 || got.PerRecord["risk"]["rec-0007"] != 2 {
		t.Fatalf("counts %+v", got)
	}
}

func TestRiskHangContextDeadline(t *testing.T) {
	a := start(t, stubapi.Config{Hang: map[string]int{"rec-0001": 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, err := client(a).Risk(ctx, "rec-0001")
	if !errors.Is(err, context.DeadlineExceeded) || !records.IsTemporary(err) ||
		err.Error() != "risk API: GET /v1/risk/rec-0001: context deadline exceeded" {
		t.Fatalf("error %v", err)
	}
}

func TestConnectionRefusedIsTemporary(t *testing.T) {
	a := start(t, stubapi.Config{})
	url := a.GeoURL
	a.Close()
	_, _, err := records.Client{GeoURL: url}.Geo(context.Background(), "rec-0001")
	if err == nil || !records.IsTemporary(err) {
		t.Fatalf("error %v, want a temporary one", err)
	}
}

func upload(t *testing.T, base string, u records.Upload, header map[string]string) (int, httpidem.Problem) {
	t.Helper()
	b, _ := json.Marshal(u)
	req, err := http.NewRequest(http.MethodPost, base+"/v1/uploads", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var p httpidem.Problem
	if resp.StatusCode >= 400 {
		json.Unmarshal(body, &p)
	} else if resp.StatusCode == http.StatusCreated {
		var seq struct{ Seq int64 }
		if err := json.Unmarshal(body, &seq); err != nil || seq.Seq <= 0 || resp.Header.Get("Location") == "" {
			t.Fatalf("201 body %q, Location %q", body, resp.Header.Get("Location"))
		}
	}
	return resp.StatusCode, p
}

var u1 = records.Upload{ID: "rec-0001", Name: "Asha Iyer", Email: "a@b.in", Region: "ap-south", Segment: "smb", RiskBand: "low", AmountPaise: 500}

func TestUploadWithKeyIsDeduplicated(t *testing.T) {
	a := start(t, stubapi.Config{})
	h := map[string]string{httpidem.KeyHeader: `"run-1:upload:rec-0001"`}
	for range 2 {
		if st, p := upload(t, a.UploadURL, u1, h); st != http.StatusCreated {
			t.Fatalf("status %d: %+v", st, p)
		}
	}
	got := a.Counts()
	if got.Uploads != 1 || got.Records != 1 || got.Duplicates != 0 || got.Calls["upload"] != 2 || got.Err != nil {
		t.Fatalf("counts %+v", got)
	}
	rows, err := a.Rows(context.Background(), "")
	if err != nil || len(rows) != 1 || rows[0].IdemKey != "run-1:upload:rec-0001" || rows[0].RecordID != "rec-0001" {
		t.Fatalf("rows %+v, %v", rows, err)
	}
}

func TestUploadWithoutKeyDuplicates(t *testing.T) {
	a := start(t, stubapi.Config{})
	for range 2 {
		if st, p := upload(t, a.UploadURL, u1, nil); st != http.StatusCreated {
			t.Fatalf("status %d: %+v", st, p)
		}
	}
	got := a.Counts()
	if got.Uploads != 2 || got.Records != 1 || got.Duplicates != 1 || got.PerRecord["upload"]["rec-0001"] != 2 {
		t.Fatalf("counts %+v", got)
	}
}

func TestUploadFenced(t *testing.T) {
	a := start(t, stubapi.Config{})
	cl, err := httpidem.NewClient(httpidem.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(u1)
	ctx := context.Background()
	rc, err := cl.Write(ctx, httpidem.Request{URL: a.UploadURL + "/v1/uploads", Key: "run-9:upload:rec-0001", Run: "run-9", Token: 2, Body: b})
	if err != nil || rc.Status != http.StatusCreated {
		t.Fatalf("write with token 2: %+v, %v", rc, err)
	}
	u2 := u1
	u2.ID = "rec-0002"
	b2, _ := json.Marshal(u2)
	_, err = cl.Write(ctx, httpidem.Request{URL: a.UploadURL + "/v1/uploads", Key: "run-9:upload:rec-0002", Run: "run-9", Token: 1, Body: b2})
	if !errors.Is(err, httpidem.ErrFenced) {
		t.Fatalf("write with token 1: %v, want fenced", err)
	}
	// Another payload under a used key is a 422, not counted as fenced.
	if st, _ := upload(t, a.UploadURL, u2, map[string]string{httpidem.KeyHeader: "run-9:upload:rec-0001"}); st != http.StatusUnprocessableEntity {
		t.Fatalf("reused key: status %d", st)
	}
	got := a.Counts()
	if got.Fenced != 1 || got.Uploads != 1 {
		t.Fatalf("counts %+v", got)
	}
	rows, err := a.Rows(ctx, "run-9")
	if err != nil || len(rows) != 1 || rows[0].Token != 2 {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	resp, err := http.Get(a.UploadURL + "/v1/uploads?run_id=run-9")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var listed []stubapi.Row
	if err := json.NewDecoder(resp.Body).Decode(&listed); err != nil || len(listed) != 1 || listed[0].RunID != "run-9" {
		t.Fatalf("GET listing %+v, %v", listed, err)
	}
}

func TestResetAndIndependence(t *testing.T) {
	a := start(t, stubapi.Config{})
	b := start(t, stubapi.Config{})
	if st, _ := upload(t, a.UploadURL, u1, nil); st != http.StatusCreated {
		t.Fatal(st)
	}
	if _, _, err := client(a).Risk(context.Background(), "rec-0001"); err != nil {
		t.Fatal(err)
	}
	if got := b.Counts(); got.Uploads != 0 || len(got.Calls) != 0 {
		t.Fatalf("the second instance saw the first's traffic: %+v", got)
	}
	a.Reset()
	got := a.Counts()
	if len(got.Calls) != 0 || len(got.PerRecord) != 0 || got.Uploads != 1 {
		t.Fatalf("after Reset: %+v", got)
	}
}

func TestStartRefusesBadConfig(t *testing.T) {
	if _, err := stubapi.Start(stubapi.Config{}); err == nil || !strings.Contains(err.Error(), "Dir") {
		t.Fatalf("no Dir: %v", err)
	}
	if _, err := stubapi.Start(stubapi.Config{Dir: t.TempDir(), GeoRate: -1}); err == nil || !strings.Contains(err.Error(), "GeoRate") {
		t.Fatalf("negative rate: %v", err)
	}
}

// A reversal of an upload is keyed and fenced like a create: the first marks the upload
// reversed (201); its repeat under the same key is the stored answer; another key reverses
// nothing more (200, existing); a key never uploaded is a 404, a body naming another record
// a 409, a lower token fenced; the upload counts keep their meaning.
func TestReversal(t *testing.T) {
	a := start(t, stubapi.Config{})
	cl, err := httpidem.NewClient(httpidem.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, u := range []records.Upload{u1, {ID: "rec-0002", Name: "B", Email: "b@b.in", AmountPaise: 100}} {
		b, _ := json.Marshal(u)
		if _, err := cl.Write(ctx, httpidem.Request{URL: a.UploadURL + "/v1/uploads", Key: "run-7:upload:" + u.ID, Run: "run-7", Token: uint64(i + 1), Body: b}); err != nil {
			t.Fatal(err)
		}
	}
	reverse := func(key, revKey, id string, token uint64) (httpidem.Receipt, error) {
		b, _ := json.Marshal(stubapi.Reversal{ID: id})
		return cl.Write(ctx, httpidem.Request{URL: a.UploadURL + stubapi.ReversalPath(key), Key: revKey, Run: "run-7", Token: token, Body: b})
	}
	rc, err := reverse("run-7:upload:rec-0001", "run-7:upload:rec-0001:rev", "rec-0001", 5)
	if err != nil || rc.Status != http.StatusCreated || rc.Replayed {
		t.Fatalf("first reversal: %+v, %v; want 201", rc, err)
	}
	rc, err = reverse("run-7:upload:rec-0001", "run-7:upload:rec-0001:rev", "rec-0001", 5)
	if err != nil || rc.Status != http.StatusCreated || !rc.Replayed {
		t.Fatalf("the same reversal again: %+v, %v; want the stored 201", rc, err)
	}
	rc, err = reverse("run-7:upload:rec-0001", "another-key", "rec-0001", 5)
	if err != nil || rc.Status != http.StatusOK || rc.Replayed {
		t.Fatalf("a reversal of it under another key: %+v, %v; want 200, existing", rc, err)
	}
	var e *httpidem.Error
	if _, err = reverse("run-7:upload:rec-0404", "run-7:upload:rec-0404:rev", "rec-0404", 5); !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Problem.Type != stubapi.TypeNotUploaded {
		t.Fatalf("a reversal of a key never uploaded: %v, want 404 %s", err, stubapi.TypeNotUploaded)
	}
	if _, err = reverse("run-7:upload:rec-0002", "run-7:upload:rec-0002:rev", "rec-0001", 5); !errors.As(err, &e) || e.Status != http.StatusConflict || e.Problem.Type != stubapi.TypeReversalMismatch {
		t.Fatalf("a reversal naming another record: %v, want 409 %s", err, stubapi.TypeReversalMismatch)
	}
	if _, err = reverse("run-7:upload:rec-0002", "run-7:upload:rec-0002:rev2", "rec-0002", 4); !errors.Is(err, httpidem.ErrFenced) {
		t.Fatalf("a reversal under token 4 after 5: %v, want fenced", err)
	}
	got := a.Counts()
	if got.Uploads != 2 || got.Records != 2 || got.Duplicates != 0 || got.Reversed != 1 || got.Fenced != 1 || got.Calls[stubapi.APIReversal] != 6 || got.Err != nil {
		t.Fatalf("counts %+v; want 2 uploads, 1 reversed, 1 fenced, 6 reversal calls", got)
	}
	resp, err := http.Get(a.UploadURL + "/v1/uploads?run_id=run-7")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var listed []stubapi.Row
	if err := json.NewDecoder(resp.Body).Decode(&listed); err != nil || len(listed) != 2 ||
		!listed[0].Reversed || listed[0].RecordID != "rec-0001" || listed[0].ReversalSeq == 0 || listed[1].Reversed {
		t.Fatalf("GET listing %+v, %v; want rec-0001 reversed, rec-0002 not", listed, err)
	}
	// Without an Idempotency-Key a reversal is refused.
	resp2, err := http.Post(a.UploadURL+stubapi.ReversalPath("run-7:upload:rec-0002"), "application/json", strings.NewReader(`{"id":"rec-0002"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusBadRequest || a.Counts().Reversed != 1 {
		t.Fatalf("a reversal without a key: %d, %d reversed; want 400 and still 1", resp2.StatusCode, a.Counts().Reversed)
	}
}
