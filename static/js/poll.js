// Live status: every row (or the detail page) with data-status-url polls its small JSON endpoint.
(function () {
  function describe(run) {
    if (!run) return "—";
    var p = run.progress || {}, parts = [run.status];
    if (p.phase) parts.push(p.phase);
    if (p.trial && p.max_trials) parts.push("trial " + p.trial + " of " + p.max_trials);
    else if (p.trial) parts.push("trial " + p.trial);
    if (p.concurrency) parts.push("N = " + p.concurrency);
    return parts.join(" · ");
  }
  function poll() {
    document.querySelectorAll("[data-status-url]").forEach(function (el) {
      fetch(el.dataset.statusUrl, {credentials: "same-origin"}).then(function (r) {
        return r.ok ? r.json() : null;
      }).then(function (d) {
        if (!d) return;
        var s = el.querySelector(".js-status"), p = el.querySelector(".js-progress");
        if (s) s.textContent = d.status_display + (d.status_reason ? " — " + d.status_reason : "");
        if (p) p.textContent = describe(d.run);
      }).catch(function () {});
    });
  }
  setInterval(poll, 3000);
})();
