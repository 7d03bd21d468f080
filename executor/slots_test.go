package executor

import (
	"context"
	"testing"
	"time"
)

// TestSlotsFairBetweenTeams: with every place held by team A and A's
// flood queued, a run of team B gets the next place freed, not the tenth;
// a team at its own limit waits while others go on; a waiter whose
// context ends holds nothing.
func TestSlotsFairBetweenTeams(t *testing.T) {
	s := newSlots(2, 0)
	// The waiters left at the end give up with the test.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 {
		if !s.acquire(ctx, "a", 0) {
			t.Fatal("acquire")
		}
	}
	order := make(chan string, 20)
	wait := func(team string, limit int) {
		go func() {
			if s.acquire(ctx, team, limit) {
				order <- team
			}
		}()
	}
	for range 10 {
		wait("a", 0)
	}
	waitQueued(t, s, "a", 10)
	wait("b", 0)
	waitQueued(t, s, "b", 1)
	s.release("a")
	if got := <-order; got != "b" {
		t.Fatalf("the first freed place went to team %s, want b", got)
	}
	s.release("b")
	if got := <-order; got != "a" {
		t.Fatalf("then %s, want a", got)
	}

	// Team c may hold one place: its second run waits, d's does not.
	s2 := newSlots(3, 0)
	if !s2.acquire(ctx, "c", 1) {
		t.Fatal("acquire")
	}
	done := make(chan bool, 1)
	go func() { done <- s2.acquire(ctx, "c", 1) }()
	waitQueued(t, s2, "c", 1)
	if !s2.acquire(ctx, "d", 1) {
		t.Fatal("team d could not acquire past team c's limit")
	}
	s2.release("c")
	if !<-done {
		t.Fatal("c's second run was not granted once its first ended")
	}

	// A waiter that gives up leaves nothing behind.
	s3 := newSlots(1, 0)
	s3.acquire(ctx, "e", 0)
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	if s3.acquire(cctx, "f", 0) {
		t.Fatal("acquire succeeded on a cancelled context with no place free")
	}
	s3.release("e")
	if !s3.acquire(ctx, "g", 0) {
		t.Fatal("the freed place was lost")
	}
	if s3.held != 1 || len(s3.waiting) != 0 || len(s3.turn) != 0 {
		t.Errorf("state after: held %d, waiting %v, turn %v", s3.held, s3.waiting, s3.turn)
	}
}

// waitQueued waits until team has n runs waiting.
func waitQueued(t *testing.T, s *slots, team string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		got := len(s.waiting[team])
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("team %s has %d waiting, want %d", team, got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlotsTeamShare: a team that asks for no limit of its own, or for
// more than its share, holds at most its share of the node's places, so a
// place is left for another team however long the first team's runs last;
// a team's own lower limit still holds.
func TestSlotsTeamShare(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name         string
		max, share   int
		limit, holds int
	}{
		{"no limit of its own", 2, 1, 0, 1},
		{"a limit above the share", 4, 2, 8, 2},
		{"a limit below the share", 4, 3, 1, 1},
		{"no share", 2, 0, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSlots(tc.max, tc.share)
			for range tc.holds {
				if !s.acquire(ctx, "a", tc.limit) {
					t.Fatal("acquire within the share")
				}
			}
			// The team's next run waits, whatever its limit says.
			granted := make(chan bool, 1)
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			go func() { granted <- s.acquire(wctx, "a", tc.limit) }()
			waitQueued(t, s, "a", 1)
			if tc.holds < tc.max && !s.acquire(ctx, "b", 0) {
				t.Fatal("team b found no place beside team a")
			}
			wcancel()
			if <-granted {
				t.Fatalf("team a was granted more than %d places", tc.holds)
			}
		})
	}
}
