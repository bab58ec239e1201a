package ui

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// capacityPage is issue 39's Capacity page, opened from the nav on
// TestWebUI's stack (wharf: one node of 4 GPUs, none in use; dock: no
// GPUs): wharf's bar says 0 used, 4 free of 4 in text, dock says it has
// none; wharf's occupancy line has at least one sample (the controller
// samples a view as soon as it syncs) and a text alternative naming the
// same figures; the page reloads on its own; axe-core clean, light and
// dark.
func capacityPage(t *testing.T, b *browserSession, page context.Context) {
	run(t, page, "open Capacity from the nav", chromedp.Click(chromedp.CSS(`a[data-nav=capacity]`)))
	waitJS(t, page, "wharf's GPU bar and dock's none", `(() => {
		const bar = document.querySelector('[data-testid=gpu-bar][data-cluster=wharf]');
		const dock = document.querySelector('#cap-now section[data-cluster=dock] [data-testid=cap-status]');
		return !!bar && bar.textContent === '0 used, 4 free of 4' && !!dock && dock.textContent === 'no GPUs' &&
			document.querySelectorAll('#cap-now [data-testid=gpu-bar]').length === 1;
	})()`, time.Minute)
	if got := eval[string](t, page, `document.querySelector('a[data-nav=capacity]').getAttribute('aria-current')`); got != "page" {
		t.Errorf("the Capacity nav entry's aria-current: %q, want page", got)
	}
	waitJS(t, page, "wharf's occupancy line with a sample", `(() => {
		const chart = document.querySelector('svg[data-testid=occupancy][data-cluster=wharf]');
		return !!chart && Number(chart.dataset.samples) >= 1 && chart.querySelectorAll('polyline.occ').length >= 1;
	})()`, time.Minute)
	alt := eval[string](t, page, `(() => {
		const chart = document.querySelector('svg[data-testid=occupancy][data-cluster=wharf]');
		return chart.getAttribute('role') + ' | ' + document.getElementById(chart.getAttribute('aria-labelledby')).textContent;
	})()`)
	if !strings.HasPrefix(alt, "img | wharf: 0 of 4 GPUs in use at ") || !strings.Contains(alt, "over the last hour between 0 and 0 in use") {
		t.Errorf("wharf's line's text alternative: %q", alt)
	}
	if got := eval[string](t, page, `document.querySelector('#cap-history section[data-cluster=dock] [data-testid=history-status]').textContent`); got != "no GPUs" {
		t.Errorf("dock's history: %q, want no GPUs", got)
	}
	run(t, page, "mark the bars", chromedp.Evaluate[chromedp.Void](`document.querySelector('#cap-now section').__old = true`))
	waitJS(t, page, "the page reloads the capacity", `(() => {
		const s = document.querySelector('#cap-now section');
		return !!s && !s.__old && !!document.querySelector('[data-testid=gpu-bar][data-cluster=wharf]');
	})()`, time.Minute)
	b.screenshot(t, page, "capacity")
	b.checkAxe(t, page, "capacity")
	noHorizontalScroll(t, page, "capacity")
	run(t, page, "dark", colorScheme("dark"))
	b.checkAxe(t, page, "capacity (dark)")
	run(t, page, "light", colorScheme("light"))
}
