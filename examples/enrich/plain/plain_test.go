package plain_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/cairnhq/cairn/examples/enrich/plain"
	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
)

// setup writes n records and starts the outside systems with c.
func setup(t *testing.T, n int, c stubapi.Config) (string, *stubapi.APIs) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "records.jsonl")
	if _, err := records.Generate(path, n, 1); err != nil {
		t.Fatal(err)
	}
	c.Dir = dir
	a, err := stubapi.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return path, a
}

func config(path string, a *stubapi.APIs) plain.Config {
	return plain.Config{
		Records:   path,
		APIs:      records.Client{ProfileURL: a.ProfileURL, GeoURL: a.GeoURL, RiskURL: a.RiskURL},
		UploadURL: a.UploadURL,
	}
}

// checkClientServer compares the job's client-side counts with the servers'.
func checkClientServer(t *testing.T, rep plain.Report, got stubapi.Counts) {
	t.Helper()
	for _, api := range []string{"profile", "geo", "risk", "upload"} {
		if rep.Calls[api] != got.Calls[api] {
			t.Errorf("%s: the job counted %d calls, the server %d", api, rep.Calls[api], got.Calls[api])
		}
	}
	if rep.TooMany != got.TooMany {
		t.Errorf("the job got %d 429s, the geo API sent %d", rep.TooMany, got.TooMany)
	}
	if rep.Uploaded != got.Uploads {
		t.Errorf("the job had %d uploads answered 201, the table has %d rows", rep.Uploaded, got.Uploads)
	}
}

func TestHungCallRestartsFromStepOne(t *testing.T) {
	path, a := setup(t, 30, stubapi.Config{Hang: map[string]int{"rec-0007": 1}})
	c := config(path, a)
	// The default 2 s call timeout: a shorter one times out a slow answer on a busy machine,
	// and the restarts would count it.
	rep, err := plain.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	got := a.Counts()
	if rep.Restarts != 1 || got.Hung != 1 {
		t.Fatalf("Restarts %d, Hung %d; want 1 and 1", rep.Restarts, got.Hung)
	}
	// Run one enriched rec-0001..rec-0006 and called all three APIs for rec-0007 before
	// its risk call timed out; run two enriched all 30.
	for i := 1; i <= 30; i++ {
		id := records.FormatID(i, 4)
		want := 1
		if i <= 7 {
			want = 2
		}
		for _, api := range []string{"profile", "risk"} {
			if n := got.PerRecord[api][id]; n != want {
				t.Errorf("%s API calls for %s: %d, want %d", api, id, n, want)
			}
		}
		if n := got.PerRecord["geo"][id]; n < want {
			t.Errorf("geo API calls for %s: %d, want at least %d", id, n, want)
		}
	}
	if got.Calls["profile"] != 37 || got.Calls["risk"] != 37 {
		t.Errorf("profile calls %d, risk calls %d; want 37 each", got.Calls["profile"], got.Calls["risk"])
	}
	// The run failed before its upload step: nothing was uploaded twice.
	if got.Uploads != 29 || got.Records != 29 || got.Duplicates != 0 || rep.Invalid != 1 {
		t.Errorf("uploads %d of %d records, %d duplicates, %d invalid; want 29, 29, 0, 1",
			got.Uploads, got.Records, got.Duplicates, rep.Invalid)
	}
	if rep.Redone < c.CallTimeout || rep.Took < rep.Redone {
		t.Errorf("Redone %s, Took %s: the failed run waited out a %s timeout", rep.Redone, rep.Took, c.CallTimeout)
	}
	checkClientServer(t, rep, got)
}

func TestCrashInUploadDuplicates(t *testing.T) {
	path, a := setup(t, 30, stubapi.Config{GeoRate: 1000})
	c := config(path, a)
	crashed := 0
	c.Crash = func(step string, n int) bool {
		if step == plain.StepUpload && n == 10 && crashed == 0 {
			crashed++
			return true
		}
		return false
	}
	rep, err := plain.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	got := a.Counts()
	if rep.Restarts != 1 || crashed != 1 {
		t.Fatalf("Restarts %d, crashes %d; want 1 and 1", rep.Restarts, crashed)
	}
	// The 10 uploads before the crash were made again by run two: 10 duplicates.
	if got.Duplicates != 10 || got.Uploads != 39 || got.Records != 29 || rep.Uploaded != 39 {
		t.Errorf("uploads %d of %d records, %d duplicates, %d answered 201; want 39, 29, 10, 39",
			got.Uploads, got.Records, got.Duplicates, rep.Uploaded)
	}
	for i := 1; i <= 30; i++ {
		id := records.FormatID(i, 4)
		if n := got.PerRecord["profile"][id]; n != 2 {
			t.Errorf("profile calls for %s: %d, want 2 (every record enriched again)", id, n)
		}
	}
	checkClientServer(t, rep, got)
}

func TestGivesUpAfterMaxRestarts(t *testing.T) {
	path, a := setup(t, 3, stubapi.Config{GeoRate: 1000})
	c := config(path, a)
	c.MaxRestarts = 2
	crashes := 0
	c.Crash = func(step string, n int) bool {
		if step == plain.StepEnrich && n == 1 {
			crashes++
			return true
		}
		return false
	}
	rep, err := plain.Run(context.Background(), c)
	if !errors.Is(err, plain.ErrCrashed) {
		t.Fatalf("error %v, want ErrCrashed", err)
	}
	if rep.Restarts != 2 || crashes != 3 || rep.Uploaded != 0 || a.Counts().PerRecord["profile"]["rec-0001"] != 3 {
		t.Fatalf("Restarts %d, crashes %d, uploaded %d, counts %+v", rep.Restarts, crashes, rep.Uploaded, a.Counts())
	}
}

func TestRefusesBadConfig(t *testing.T) {
	if _, err := plain.Run(context.Background(), plain.Config{UploadURL: "http://x"}); err == nil {
		t.Fatal("no records file: no error")
	}
	if _, err := plain.Run(context.Background(), plain.Config{Records: "r", UploadURL: "http://x", MaxRestarts: -1}); err == nil {
		t.Fatal("negative MaxRestarts: no error")
	}
}
