package night

import "testing"

// The sender's rule accepts exactly the recipients the steps derive.
func TestRecipientsAreTheOnesTheStepsDerive(t *testing.T) {
	t.Parallel()
	ok := Recipients("finance-head@cairn.local")
	for _, c := range []struct {
		kind, to string
		want     bool
	}{
		{kindDebit, SupplierAddress("SUP-07"), true},
		{kindWithdraw, SupplierAddress("SUP-07"), true},
		{kindReport, "finance-head@cairn.local", true},
		{kindWithdraw, "finance-head@cairn.local", true},
		{kindDebit, "finance-head@cairn.local", false},
		{kindReport, SupplierAddress("SUP-07"), false},
		{kindDebit, "attacker@evil.example", false},
		{kindDebit, "accounts+@suppliers.example", false},
		{kindDebit, "accounts+SUP-07@suppliers.example", false},
		{kindDebit, "accounts+sup-07@suppliers.example.evil.example", false},
		{kindDebit, "Payroll <accounts+sup-07@suppliers.example>", false},
		{kindDebit, "accounts+a@b@suppliers.example", false},
		{"handover", "finance-head@cairn.local", false},
		{"invoice", SupplierAddress("SUP-07"), false},
	} {
		if got := ok(c.kind, c.to); got != c.want {
			t.Errorf("Recipients(%s, %q) = %v, want %v", c.kind, c.to, got, c.want)
		}
	}
}
