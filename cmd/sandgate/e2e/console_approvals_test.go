package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandgate/sandgate"
)

// decideByKeyboard types comment into an approval's card and presses
// button ("approve" or "deny") with the keyboard.
func decideByKeyboard(b *browserSession, id, comment, button string) {
	b.t.Helper()
	box := fmt.Sprintf(`article.approval[data-approval=%q] textarea`, id)
	b.do("comment and "+button,
		chromedp.Focus(chromedp.CSS(box)),
		chromedp.SendKeys(chromedp.CSS(box), comment))
	b.do("tab to "+button, chromedp.KeyEvent(kb.Tab))
	if button == "deny" {
		b.do("tab to deny", chromedp.KeyEvent(kb.Tab))
	}
	if got := b.text(`document.activeElement.dataset.key || ''`); got != button+"-"+id {
		b.t.Fatalf("the focus is on %q, want the %s button", got, button)
	}
	b.do("press "+button, chromedp.KeyEvent(kb.Enter))
}

// TestConsoleApprovals: the approvals page in Chromium against a real
// gateway (Docker, Postgres). A run above the team's maximum waits for
// approval; its requester, though an approver, sees it with the rule,
// what was asked, its age and expiry, and her own approval is refused by
// the server, the page showing the error's code; another approver
// approves it by keyboard with a comment and sees the run start and
// finish; the history tab lists it granted with the approver and the
// comment. Both tabs are axe-core clean.
func TestConsoleApprovals(t *testing.T) {
	requireChromium(t)
	s, tok, maxMB := startApprovalServer(t)
	run := askApproval(t, s, tok, maxMB)
	id := run.Approval.ID
	card := fmt.Sprintf(`article.approval[data-approval=%q]`, id)

	b := newBrowser(t, "")
	b.do("open the approvals page", chromedp.Navigate(s.URL+"/console/#/approvals"))
	b.signIn(tok["rita"])
	b.waitJS("the pending approval", `!!document.querySelector('`+card+`')`, 30*time.Second)
	b.checkAxe("approvals")
	text := b.text(`document.querySelector('` + card + `').innerText`)
	for _, want := range []string{"asked by rita", "resources_approval", itoa(maxMB+1) + " MiB memory", "echo approved", "Expires", "in "} {
		if !strings.Contains(text, want) {
			t.Errorf("the approval's card does not show %q:\n%s", want, text)
		}
	}

	// The attack: the requester approves her own request from the page.
	decideByKeyboard(b, id, "mine", "approve")
	b.waitJS("the refusal shown", `!!document.querySelector('`+card+` .result .error')`, 20*time.Second)
	if got := b.text(`document.querySelector('` + card + ` .result .error').textContent`); !strings.Contains(got, string(sandgate.CodeForbidden)) {
		t.Errorf("the self-approval's error reads %q, want its code %s", got, sandgate.CodeForbidden)
	}
	if got := runAs(t, s, tok["rita"], run.ID); got.State != sandgate.StatePendingApproval {
		t.Fatalf("after the refused self-approval the run is %s", got.State)
	}

	b.do("sign out", chromedp.Click(chromedp.CSS("#signout")))
	b.signIn(tok["carol"])
	b.waitJS("the pending approval for carol", `!!document.querySelector('`+card+`')`, 30*time.Second)
	decideByKeyboard(b, id, "ticket OPS-142", "approve")
	b.waitJS("granted", `document.querySelector('`+card+` .result')?.textContent.includes('granted')`, 60*time.Second)
	if got := b.text(`document.querySelector('` + card + ` .result .run-state').dataset.state`); got == string(sandgate.StatePendingApproval) || got == "" {
		t.Errorf("after the grant the page shows the run %q, want it started", got)
	}
	// The requester sees it run on its page.
	b.do("sign out", chromedp.Click(chromedp.CSS("#signout")))
	b.signIn(tok["rita"])
	b.goTo("#/runs/" + run.ID)
	b.waitJS("the approved run finished", `document.getElementById('run-state')?.dataset.state === 'finished'`, 2*time.Minute)
	if got := runAs(t, s, tok["rita"], run.ID); got.Outcome == nil || *got.Outcome != sandgate.OutcomeSucceeded || !strings.Contains(got.Stdout.Data, "approved") {
		t.Errorf("the approved run = %+v", got)
	}

	b.goTo("#/approvals?tab=history")
	row := fmt.Sprintf(`tr[data-approval=%q][data-status="granted"]`, id)
	b.waitJS("the history lists it granted", `!!document.querySelector('`+row+`')`, 30*time.Second)
	if got := b.text(`document.querySelector('` + row + `').innerText`); !strings.Contains(got, "carol") || !strings.Contains(got, "ticket OPS-142") {
		t.Errorf("the history's row reads %q, want the approver and the comment", got)
	}
	b.checkAxe("approvals history")
	if got := b.consoleProblems(); len(got) > 0 {
		t.Errorf("the browser reported errors or dialogs: %q", got)
	}
}
