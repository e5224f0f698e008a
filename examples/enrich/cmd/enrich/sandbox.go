package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
	"github.com/cairnhq/cairn/pkg/chaos"
	"github.com/cairnhq/cairn/pkg/faults"
)

// sandboxRecords is how many records a chaos trial runs (ENRICH_CHAOS_RECORDS overrides).
const sandboxRecords = 12

// sandbox is `enrich chaos-sandbox DIR`, for `cairn chaos --pipeline enrich`: the job's four
// outside systems (the stub APIs, the upload system's rows in DIR/upload), a records file
// for the run's input, and the job's data folder DIR/data. Its effects are the upload
// system's rows (each record's upload, and its reversal if one was made) and its calls every
// API's requests.
func sandbox(ctx context.Context, dir string) error {
	n := sandboxRecords
	if v := os.Getenv("ENRICH_CHAOS_RECORDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			return fmt.Errorf("ENRICH_CHAOS_RECORDS must be a count of records, not %q", v)
		}
	}
	upload := filepath.Join(dir, "upload")
	if err := os.MkdirAll(upload, 0o755); err != nil {
		return err
	}
	apis, err := stubapi.Start(stubapi.Config{Dir: upload})
	if err != nil {
		return err
	}
	defer apis.Close()
	source := filepath.Join(dir, "records.jsonl")
	if _, err := records.Generate(source, n, 1); err != nil {
		return err
	}
	// Inside each enrichment: after its middle record's answer is memoised (the step fires
	// the write points around each call, Attempt.Fault).
	var own []string
	for _, s := range []string{enrich.Profile, enrich.Geo, enrich.Risk} {
		own = append(own, fmt.Sprintf("%s.%s.%d=exit@once", s, faults.AfterWrite, (n+1)/2))
	}
	return chaos.ServeSandbox(ctx, os.Stdin, os.Stdout, chaos.Sandbox{
		Env: []string{
			"ENRICH_DATA_DIR=" + filepath.Join(dir, "data"),
			"ENRICH_PROFILE_URL=" + apis.ProfileURL, "ENRICH_GEO_URL=" + apis.GeoURL, "ENRICH_RISK_URL=" + apis.RiskURL,
			"ENRICH_UPLOAD_URL=" + apis.UploadURL,
			"ENRICH_CALL_TIMEOUT=2s", "ENRICH_GEO_RPS=15", // below the geo API's 20 a second
			"CAIRN_LEASE=3s", "CAIRN_HEARTBEAT=1s", "CAIRN_ACK_WAIT=3s",
		},
		Input:  map[string]any{enrich.ParamSource: source},
		Points: own,
		Effects: func(ctx context.Context) (chaos.Effects, error) {
			rows, err := apis.Rows(ctx, "")
			if err != nil {
				return chaos.Effects{}, err
			}
			var e chaos.Effects
			for _, r := range rows {
				line := fmt.Sprintf("upload %s %s %s", r.IdemKey, r.RecordID, r.Body)
				if r.Reversed {
					line += " reversed"
				}
				e.Effects = append(e.Effects, line)
			}
			e.Calls = apis.Counts().Calls
			return e, nil
		},
	})
}
