package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Typed is a step written as a function from its input to its output, both Go values; the
// record and the artifacts keep them as JSON, as any step's.
//
// Its input In is what the step waits for (pipeline.Step.After): the output of the one
// step it waits for; for a step that waits for several, a JSON object of their outputs by
// step name (a struct with a field per step, tagged `json:"<step>"`); for a step that
// waits for none, the run's input (its members by name). An In of struct{} reads nothing.
// Every read goes into the step's input fingerprint, as Attempt.Input's.
//
// Do's output is the step's output. What the record says of the attempt besides it is
// told through the attempt as the step goes (Attempt.Park, Count, Next, Fingerprint);
// without Count, a slice, map or array output counts its length (and the items parked),
// any other output one item.
//
// The other fields are optional: each gives the step what the interface of the same name
// gives a step written as a type (Verifier, Planner, Fencer, SourceChecker,
// ProgressCounter, Versioner), and the runner reads them so (AbilitiesOf).
type Typed[In, Out any] struct {
	Do func(ctx context.Context, a *Attempt, in In) (Out, error)
	// Verify checks the output stored, decoded, against the input (decoded again from what
	// the attempt read: a change Do made to its copy is not seen).
	Verify func(ctx context.Context, a *Attempt, in In, out Out) error
	// Plan is exactly what Do will do, with no effect, for a person to approve.
	Plan func(ctx context.Context, a *Attempt, in In) (any, error)
	// RaiseFences raises the fences of the outside systems the step writes to token t.
	RaiseFences func(ctx context.Context, a *Attempt, t fence.Token) error
	// CheckSource names what changed in the run's source since its fingerprint was taken.
	CheckSource func(ctx context.Context, a *Attempt, fingerprint string) ([]string, error)
	// Progress is what the step has made durable, for the loop guard.
	Progress func(ctx context.Context, a *Attempt) (Progress, error)
	// Versions are the versions the output depends on besides the code's.
	Versions func() kc.Versions
}

// Func is the step that runs do (a Typed with no other field); set the others on what it
// returns.
func Func[In, Out any](do func(ctx context.Context, a *Attempt, in In) (Out, error)) *Typed[In, Out] {
	return &Typed[In, Out]{Do: do}
}

// Run reads the step's input, runs Do and makes its output the result.
func (t *Typed[In, Out]) Run(ctx context.Context, a *Attempt) (*Result, error) {
	in, err := readIn[In](ctx, a)
	if err != nil {
		return nil, err
	}
	out, err := t.Do(ctx, a, in)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, Permanent(fmt.Errorf("the output of %s is not JSON: %w", a.Step, err))
	}
	res := &Result{Output: b}
	a.mu.Lock()
	a.extras.fold(res, out)
	a.mu.Unlock()
	return res, nil
}

func (t *Typed[In, Out]) abilities() hooks {
	var h hooks
	if t.Verify != nil {
		h.verifier = verifierFunc(func(ctx context.Context, a *Attempt, r *Result) error {
			in, err := readIn[In](ctx, a)
			if err != nil {
				return err
			}
			var out Out
			if err := json.Unmarshal(r.Output, &out); err != nil {
				return fmt.Errorf("the stored output of %s: %w", a.Step, err)
			}
			return t.Verify(ctx, a, in, out)
		})
	}
	if t.Plan != nil {
		h.planner = plannerFunc(func(ctx context.Context, a *Attempt) ([]byte, error) {
			in, err := readIn[In](ctx, a)
			if err != nil {
				return nil, err
			}
			p, err := t.Plan(ctx, a, in)
			if err != nil {
				return nil, err
			}
			return json.Marshal(p)
		})
	}
	if t.RaiseFences != nil {
		h.fencer = fencerFunc(t.RaiseFences)
	}
	if t.CheckSource != nil {
		h.sourceChecker = sourceCheckerFunc(t.CheckSource)
	}
	if t.Progress != nil {
		h.counter = counterFunc(t.Progress)
	}
	if t.Versions != nil {
		h.versioner = versionerFunc(t.Versions)
	}
	return h
}

// CheckInput reads a run's input (its members by name) as the step's In, as a step that
// waits for no other reads it: an error names what does not fit (a member of another type).
func (t *Typed[In, Out]) CheckInput(input map[string]json.RawMessage) error {
	b, err := json.Marshal(input)
	if err != nil {
		return err
	}
	var in In
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("the input is no %T: %w", in, err)
	}
	return nil
}

// In is the verified output of an earlier step, decoded into a T; the read goes into the
// step's input fingerprint. A typed step reads what it waits for as its input; In reads
// any other earlier step.
func In[T any](ctx context.Context, a *Attempt, step string) (T, error) {
	var v T
	b, err := a.Input(ctx, step)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, Permanent(fmt.Errorf("the output of %s is not a %T: %w", step, v, err))
	}
	return v, nil
}

// Memo is Attempt.Memo for an answer that is a Go value, saved as JSON: the answer saved
// under key for this run, or call's, saved under key. A restart that finds it saved
// never calls again.
func Memo[T any](ctx context.Context, a *Attempt, key string, call func(ctx context.Context) (T, error)) (T, error) {
	var v T
	b, err := a.Memo(ctx, key, func(ctx context.Context) ([]byte, error) {
		v, err := call(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	})
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, Permanent(fmt.Errorf("memo %s.%s is not a %T: %w", a.RunID, key, v, err))
	}
	return v, nil
}

// readIn is a typed step's input: see Typed. The attempt keeps the bytes it read, so that
// Plan, Do and Verify read the inputs once, and each decodes a copy of its own.
func readIn[In any](ctx context.Context, a *Attempt) (In, error) {
	var in In
	if t := reflect.TypeFor[In](); t.Kind() == reflect.Struct && t.NumField() == 0 {
		return in, nil
	}
	a.mu.Lock()
	b := a.typedIn
	a.mu.Unlock()
	if b == nil {
		var err error
		if b, err = readInBytes(ctx, a); err != nil {
			return in, err
		}
		a.mu.Lock()
		a.typedIn = b
		a.mu.Unlock()
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return in, Permanent(fmt.Errorf("the input of %s is not a %T: %w", a.Step, in, err))
	}
	return in, nil
}

// readInBytes is the JSON a typed step's input is decoded from.
func readInBytes(ctx context.Context, a *Attempt) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	switch waits := a.r.cfg.Pipeline.Waits(a.Step); len(waits) {
	case 0:
		b, err = json.Marshal(a.Params.Input)
	case 1:
		b, err = a.Input(ctx, waits[0])
	default:
		all := make(map[string]json.RawMessage, len(waits))
		for _, w := range waits {
			if all[w], err = a.Input(ctx, w); err != nil {
				return nil, err
			}
		}
		b, err = json.Marshal(all)
	}
	return b, err
}

// extras is what an attempt told of its result besides the output (Park, Count, Next,
// Fingerprint).
type extras struct {
	parked      []kc.Parked
	items       *int
	next        string
	fingerprint string
}

// fold puts the extras into res where the step left a field empty; out is the step's
// output, whose length counts the items when none were told.
func (e *extras) fold(res *Result, out any) {
	res.Parked = append(res.Parked, e.parked...)
	switch {
	case res.Items != 0:
	case e.items != nil:
		res.Items = *e.items
	case out != nil:
		switch v := reflect.ValueOf(out); v.Kind() {
		case reflect.Slice, reflect.Map, reflect.Array:
			res.Items = v.Len() + len(e.parked)
		default:
			res.Items = 1
		}
	}
	if res.NextAction == "" {
		res.NextAction = e.next
	}
	if res.SourceFingerprint == "" {
		res.SourceFingerprint = e.fingerprint
	}
	*e = extras{} // told once
}

// Park sets an item aside with the reason it cannot be done: the step goes on, and the
// item is listed in the record for a person (no more than Config.ParkLimit of the step's
// items, or the run is handed over).
func (a *Attempt) Park(item, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.extras.parked = append(a.extras.parked, kc.Parked{Item: item, Reason: reason})
}

// Count says how many items the step handled, parked ones included, when its output's
// length does not.
func (a *Attempt) Count(items int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.extras.items = &items
}

// Next says what the run does next, for a person reading the record.
func (a *Attempt) Next(action string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.extras.next = action
}

// Fingerprint sets the run's source fingerprint (a source step's: what it read), which the
// steps that check the source compare the source with after a break.
func (a *Attempt) Fingerprint(fp string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.extras.fingerprint = fp
}

// Abilities are what a step does besides Run, as the runner sees it: from the interfaces
// its type implements, or from a Typed step's fields.
type Abilities struct {
	Fences, Verifies, ChecksSource, Plans, CountsProgress, Versions bool
}

// AbilitiesOf tells what s does besides Run.
func AbilitiesOf(s Step) Abilities {
	h := hooksOf(s)
	return Abilities{Fences: h.fencer != nil, Verifies: h.verifier != nil, ChecksSource: h.sourceChecker != nil,
		Plans: h.planner != nil, CountsProgress: h.counter != nil, Versions: h.versioner != nil}
}

// hooks are a step's abilities, each nil when it has none.
type hooks struct {
	fencer        Fencer
	verifier      Verifier
	sourceChecker SourceChecker
	planner       Planner
	counter       ProgressCounter
	versioner     Versioner
}

// hooksOf reads s's abilities: a Typed step's fields, or the interfaces it implements.
func hooksOf(s Step) hooks {
	if t, ok := s.(interface{ abilities() hooks }); ok {
		return t.abilities()
	}
	var h hooks
	h.fencer, _ = s.(Fencer)
	h.verifier, _ = s.(Verifier)
	h.sourceChecker, _ = s.(SourceChecker)
	h.planner, _ = s.(Planner)
	h.counter, _ = s.(ProgressCounter)
	h.versioner, _ = s.(Versioner)
	return h
}

type (
	verifierFunc      func(ctx context.Context, a *Attempt, r *Result) error
	plannerFunc       func(ctx context.Context, a *Attempt) ([]byte, error)
	fencerFunc        func(ctx context.Context, a *Attempt, t fence.Token) error
	sourceCheckerFunc func(ctx context.Context, a *Attempt, fingerprint string) ([]string, error)
	counterFunc       func(ctx context.Context, a *Attempt) (Progress, error)
	versionerFunc     func() kc.Versions
)

func (f verifierFunc) Verify(ctx context.Context, a *Attempt, r *Result) error { return f(ctx, a, r) }
func (f plannerFunc) Plan(ctx context.Context, a *Attempt) ([]byte, error)     { return f(ctx, a) }
func (f fencerFunc) RaiseFences(ctx context.Context, a *Attempt, t fence.Token) error {
	return f(ctx, a, t)
}
func (f sourceCheckerFunc) CheckSource(ctx context.Context, a *Attempt, fp string) ([]string, error) {
	return f(ctx, a, fp)
}
func (f counterFunc) Progress(ctx context.Context, a *Attempt) (Progress, error) { return f(ctx, a) }
func (f versionerFunc) Versions() kc.Versions                                    { return f() }
