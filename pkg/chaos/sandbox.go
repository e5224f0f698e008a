package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// SandboxCommand is the pipeline binary's command that starts a sandbox: `BIN chaos-sandbox DIR`.
const SandboxCommand = "chaos-sandbox"

// Hello is the line a sandbox prints once its systems are up.
type Hello struct {
	// Env is what the pipeline's services need to reach the sandbox's systems (NAME=value),
	// its data folder and short timings (CAIRN_LEASE, CAIRN_HEARTBEAT, CAIRN_ACK_WAIT) among
	// them. The driver adds CAIRN_NATS_URL and CAIRN_FAULTS.
	Env []string `json:"env"`
	// Input is the run's input, as app.Start takes it.
	Input map[string]any `json:"input"`
	// EffectsURL answers GET with the systems' Effects.
	EffectsURL string `json:"effects_url"`
	// Points are crash points the pipeline's own code fires (runner.Attempt.Fault), beyond
	// those the framework fires at every step: inside a step's loop over its items.
	Points []string `json:"points,omitempty"`
}

// Effects is what a sandbox's systems hold after a run.
type Effects struct {
	// Effects lists each effect the systems hold, one string each, in a form that is the same
	// for the same effect in every run (no sequence numbers, no times): a row written, a
	// message sent, a reversal made. An effect made twice is listed twice.
	Effects []string `json:"effects"`
	// Calls counts the requests each system answered, by system: what a crash made them do
	// again shows here.
	Calls map[string]int `json:"calls"`
}

// Sandbox is a pipeline's outside systems for one chaos trial, started fresh by the
// pipeline's `chaos-sandbox` command.
type Sandbox struct {
	Env     []string
	Input   map[string]any
	Points  []string
	Effects func(ctx context.Context) (Effects, error)
}

// ServeSandbox prints sb's Hello on out and serves its effects on a loopback port until in
// reaches its end (the driver closes the pipe) or ctx ends.
func ServeSandbox(ctx context.Context, in io.Reader, out io.Writer, sb Sandbox) error {
	if sb.Effects == nil {
		return errors.New("chaos sandbox: no Effects")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("chaos sandbox: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /effects", func(w http.ResponseWriter, r *http.Request) {
		e, err := sb.Effects(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(e)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	hello := Hello{Env: sb.Env, Input: sb.Input, Points: sb.Points, EffectsURL: "http://" + l.Addr().String() + "/effects"}
	b, err := json.Marshal(hello)
	if err != nil {
		return fmt.Errorf("chaos sandbox: %w", err)
	}
	if _, err := fmt.Fprintf(out, "%s\n", b); err != nil {
		return fmt.Errorf("chaos sandbox: %w", err)
	}
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, in); close(closed) }()
	select {
	case <-closed:
	case <-ctx.Done():
	}
	return nil
}

// readEffects GETs a sandbox's effects.
func readEffects(ctx context.Context, url string) (Effects, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Effects{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Effects{}, fmt.Errorf("reading the sandbox's effects: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return Effects{}, fmt.Errorf("reading the sandbox's effects: %s: %s", resp.Status, b)
	}
	var e Effects
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		return Effects{}, fmt.Errorf("reading the sandbox's effects: %w", err)
	}
	return e, nil
}
