package records_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/examples/enrich/records"
)

func TestGenerateReadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	recs, err := records.Generate(path, 45, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 45 || recs[0].ID != "rec-0001" || recs[44].ID != "rec-0045" {
		t.Fatalf("ids: %d records, first %q, last %q", len(recs), recs[0].ID, recs[len(recs)-1].ID)
	}
	back, err := records.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(recs, back) {
		t.Fatalf("read back differs:\n%v\n%v", recs, back)
	}
	again, err := records.Generate(filepath.Join(t.TempDir(), "again.jsonl"), 45, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(recs, again) {
		t.Fatal("Generate with the same seed is not deterministic")
	}
	var invalid []string
	for _, r := range recs {
		if err := records.Validate(records.Enriched{Record: r, Risk: records.Risk{Score: 50}}); err != nil {
			invalid = append(invalid, r.ID)
		}
	}
	if want := []string{"rec-0020", "rec-0040"}; !reflect.DeepEqual(invalid, want) {
		t.Fatalf("invalid records %v, want %v", invalid, want)
	}
	if strings.Contains(recs[19].Email, "@") || recs[39].Country != records.UnknownCountry {
		t.Fatalf("rec-0020 email %q, rec-0040 country %q", recs[19].Email, recs[39].Country)
	}
}

func TestGenerateWideIDs(t *testing.T) {
	recs, err := records.Generate(filepath.Join(t.TempDir(), "r.jsonl"), 10000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].ID != "rec-00001" || recs[9999].ID != "rec-10000" {
		t.Fatalf("ids %q..%q", recs[0].ID, recs[9999].ID)
	}
}

func TestReadNamesTheBadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	body := `{"id":"rec-0001","name":"a","email":"a@b","country":"IN","amount_paise":5}` + "\n" +
		`{"id":"rec-0002","name":` + "\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := records.Read(path)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("error %v, want one naming line 2", err)
	}
}

func TestValidateReasons(t *testing.T) {
	good := records.Enriched{
		Record: records.Record{ID: "rec-0001", Name: "A", Email: "a@example.com", Country: "IN", AmountPaise: 100},
		Risk:   records.Risk{Score: 40},
	}
	if err := records.Validate(good); err != nil {
		t.Fatalf("valid record: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*records.Enriched)
		field  string
		value  string
	}{
		{"no at", func(e *records.Enriched) { e.Record.Email = "a.example.com" }, "email", "a.example.com"},
		{"two ats", func(e *records.Enriched) { e.Record.Email = "a@b@c" }, "email", "a@b@c"},
		{"country", func(e *records.Enriched) { e.Record.Country = "ZZ" }, "country", "ZZ"},
		{"risk high", func(e *records.Enriched) { e.Risk.Score = 101 }, "risk score", "101"},
		{"risk low", func(e *records.Enriched) { e.Risk.Score = -1 }, "risk score", "-1"},
		{"zero amount", func(e *records.Enriched) { e.Record.AmountPaise = 0 }, "amount_paise", "0"},
		{"negative amount", func(e *records.Enriched) { e.Record.AmountPaise = -5 }, "amount_paise", "-5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := good
			tc.change(&e)
			err := records.Validate(e)
			if !errors.Is(err, records.ErrInvalid) {
				t.Fatalf("error %v, want ErrInvalid", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field+` "`+tc.value+`"`) || !strings.Contains(msg, "rec-0001") {
				t.Fatalf("error %q does not name %s %q and the record", msg, tc.field, tc.value)
			}
		})
	}
}

func TestTransform(t *testing.T) {
	e := records.Enriched{
		Record:  records.Record{ID: "rec-0003", Name: "  aSHA   iyer ", Email: "Asha.Iyer3@Example.COM", Country: "IN", AmountPaise: 12345},
		Profile: records.Profile{Segment: "smb"},
		Geo:     records.Geo{Region: "ap-south", Timezone: "Asia/Kolkata"},
	}
	want := records.Upload{ID: "rec-0003", Name: "Asha Iyer", Email: "asha.iyer3@example.com", Region: "ap-south",
		Segment: "smb", AmountPaise: 12345}
	for score, band := range map[int]string{0: "low", 33: "low", 34: "medium", 66: "medium", 67: "high", 100: "high"} {
		e.Risk.Score = score
		want.RiskBand = band
		if got := records.Transform(e); got != want {
			t.Errorf("score %d: got %+v, want %+v", score, got, want)
		}
	}
}
