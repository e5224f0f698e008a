package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// cairn permissions --pipeline NAME --service SERVICE prints the user of one service of a
// registered pipeline (pkg/app's TestServicePermissions runs every service under its own):
// named <pipeline>-<service>, its replies under its own inbox, its own durable and the
// events of its own step and the next; an unknown service is a usage error naming the
// pipeline's services. Without --service, the pipeline's one user, as before.
func TestPermissionsOfOneService(t *testing.T) {
	faultmapEnv(t)
	js := natstest.JetStream(t)
	t.Setenv("CAIRN_NATS_URL", js.Conn().ConnectedUrl())
	t.Setenv("CAIRN_DATA_DIR", t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := app.Config{JS: js, KeysDir: t.TempDir(),
		Pipeline: pipeline.Definition{Name: "tally", Input: []string{"source"}, Steps: []pipeline.Step{
			{Name: "read", Kind: pipeline.SourceRead, Recovery: "cheap to repeat"},
			{Name: "sum", Kind: pipeline.Compute, Recovery: "recomputed"},
			{Name: "print", Kind: pipeline.Compute, Recovery: "recomputed"},
		}},
		Steps: map[string]runner.Step{"read": constStep("rows"), "sum": constStep("total"), "print": constStep("done")},
	}
	if err := app.Init(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	sp := assets.MustSpace("tally")

	var out bytes.Buffer
	if err := runPermissions(ctx, &out, []string{"--pipeline", "tally", "--service", "sum", "--json"}); err != nil {
		t.Fatal(err)
	}
	var got assets.Permissions
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want, err := cfg.ServicePermissions("sum")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Publish, want.Publish) || !slices.Equal(got.Subscribe, want.Subscribe) || !slices.Equal(got.PublishDeny, want.PublishDeny) {
		t.Errorf("cairn permissions --service sum: %+v, want %+v", got, want)
	}
	for subject, may := range map[string]bool{
		sp.Step("sum", "*"): true, sp.Step("print", "*"): true, sp.Step("read", "*"): false,
		"$JS.API.CONSUMER.MSG.NEXT." + sp.Stream(assets.StreamSteps) + ".sum":  true,
		"$JS.API.CONSUMER.MSG.NEXT." + sp.Stream(assets.StreamSteps) + ".read": false,
		"$KV." + sp.Bucket(assets.BucketKeys) + ".>":                           false,
		sp.Root() + ">": false,
	} {
		if slices.Contains(got.Publish, subject) != may {
			t.Errorf("sum's user may publish %s: %t, want %t", subject, !may, may)
		}
	}

	out.Reset()
	if err := runPermissions(ctx, &out, []string{"--pipeline", "tally", "--service", "sum"}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"user: tally-sum", `"` + sp.ServiceInbox("sum") + `.>"`, `"` + sp.Step("print", "*") + `"`} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("cairn permissions --service sum, as conf, lacks %s:\n%s", line, out.String())
		}
	}

	err = runPermissions(ctx, &out, []string{"--pipeline", "tally", "--service", "nope"})
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "[read sum print supervisor outbox-sender compensator]") {
		t.Errorf("an unknown service: %v, want a usage error naming tally's services", err)
	}

	// Without --service: the pipeline's one user, unchanged.
	out.Reset()
	if err := runPermissions(ctx, &out, []string{"--pipeline", "tally"}); err != nil || !strings.Contains(out.String(), "user: tally\n") ||
		!strings.Contains(out.String(), `"`+sp.Root()+`>"`) || !strings.Contains(out.String(), `"`+sp.Inbox()+`.>"`) {
		t.Errorf("cairn permissions --pipeline tally (%v):\n%s", err, out.String())
	}
}
