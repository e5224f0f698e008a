package runner

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/cairnhq/cairn/pkg/pipeline"
)

// declarationsAgree refuses a step whose pipeline declaration contradicts its
// implementation, naming the step: the declaration is what `cairn faultmap` and the
// recovery rules read, so a step that does otherwise would be recovered by the wrong rule.
//
//   - ChecksSource: the implementation is a SourceChecker exactly when declared.
//   - Fenced: the implementation raises fences (a Fencer) exactly when declared; a step
//     declared fenced that raises none would let a zombie's late write land.
//   - A model call names where its answers are memoised (Memo): an unmemoised call is paid
//     again on every restart.
//   - A step that writes to an outside system verifies what it wrote before it is done (a
//     Verifier), and names the key that makes a repeat harmless
//     (Key).
func declarationsAgree(c Config) error {
	def, ok := c.Pipeline.Step(c.StepName)
	if !ok || c.Step == nil {
		return nil
	}
	var errs []error
	ab := AbilitiesOf(c.Step)
	if checks := ab.ChecksSource; checks != def.ChecksSource {
		errs = append(errs, fmt.Errorf("step %q: its definition says it checks the source %t, its implementation %t (a SourceChecker)", c.StepName, def.ChecksSource, checks))
	}
	if raises := ab.Fences; raises != def.Fenced {
		errs = append(errs, fmt.Errorf("step %q: its definition says it is fenced %t, its implementation raises fences %t (a Fencer)", c.StepName, def.Fenced, raises))
	}
	if def.Kind == pipeline.ModelCall && def.Memo == "" {
		errs = append(errs, fmt.Errorf("step %q: a model call that is not memoised (its definition names no Memo): a restart would pay for every answer again", c.StepName))
	}
	if verifies := ab.Verifies; def.Writes() && !verifies {
		errs = append(errs, fmt.Errorf("step %q: it writes to an outside system (%s) but verifies nothing before it is done (a runner.Verifier that checks what it wrote): a write that did not land would be committed as done", c.StepName, cmp.Or(def.Effects, string(def.Kind))))
	}
	if def.Writes() && def.Key == "" {
		errs = append(errs, fmt.Errorf("step %q: it writes to an outside system (%s) but its definition names no Key that makes a repeat harmless", c.StepName, def.Effects))
	}
	return errors.Join(errs...)
}
