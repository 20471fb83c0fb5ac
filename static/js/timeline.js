// Per-session timeline: lists a trial's agent sessions and draws one session's turns
// (send → first token → last token, then the tool delay) from the timeline JSON endpoint,
// a page at a time. plotly.js comes from /static/vendor like every chart on the site.
(function () {
  "use strict";
  var PAGE = 50;
  var config = { responsive: true, displaylogo: false, showLink: false };

  function fmt(v, digits) {
    return v === null || v === undefined ? "—" : Number(v).toLocaleString("en", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  function init(root) {
    var trialSel = root.querySelector('select[name="trial"]');
    var sessSel = root.querySelector('select[name="session"]');
    if (!trialSel || !sessSel) { return; }
    var moreSessions = root.querySelector("[data-more-sessions]");
    var prev = root.querySelector('[data-turns="prev"]');
    var next = root.querySelector('[data-turns="next"]');
    var plot = root.querySelector(".timeline-plot");
    var body = root.querySelector(".timeline-turns tbody");
    var status = root.querySelector(".timeline-status");
    var sessOffset = 0, sessCount = 0, turnOffset = 0;
    var generation = 0;  // a newer pick makes older answers stale: they are dropped

    function url(params) {
      return root.dataset.base + trialSel.value + root.dataset.suffix + "?" + new URLSearchParams(params).toString();
    }
    function get(params) {
      var mine = generation;
      return fetch(url(params), { headers: { Accept: "application/json" }, credentials: "same-origin" }).then(function (r) {
        return r.json().then(function (data) {
          if (mine !== generation) { throw new Stale(); }
          if (!r.ok) { throw new Error((data.error && data.error.message) || ("HTTP " + r.status)); }
          return data;
        });
      });
    }
    function Stale() { this.message = "stale"; }
    function fail(err) {
      if (err instanceof Stale) { return; }
      status.textContent = "Could not load the timeline: " + err.message;
    }

    function loadSessions(append) {
      if (!append) { generation += 1; sessOffset = 0; sessSel.innerHTML = ""; }
      status.textContent = "Loading sessions…";
      return get({ offset: sessOffset, limit: PAGE }).then(function (data) {
        sessCount = data.count;
        data.sessions.forEach(function (s) {
          var opt = document.createElement("option");
          opt.value = s.agent_id + "|" + s.session_id;
          opt.textContent = "agent " + s.agent_id + " · " + s.session_id + " · " + s.turns + " turn" + (s.turns === 1 ? "" : "s") + (s.failed ? " · " + s.failed + " failed" : "");
          sessSel.appendChild(opt);
        });
        sessOffset += data.sessions.length;
        moreSessions.hidden = sessOffset >= sessCount;
        status.textContent = sessCount + " session" + (sessCount === 1 ? "" : "s") + " in trial #" + data.trial + " (N=" + data.concurrency + ")";
        if (!append && sessSel.options.length) { turnOffset = 0; return loadTurns(); }
      }).catch(fail);
    }

    function loadTurns() {
      var parts = sessSel.value.split("|");
      var agent = parts.shift(), session = parts.join("|");
      status.textContent = "Loading turns…";
      return get({ agent: agent, session: session, offset: turnOffset, limit: PAGE }).then(function (data) {
        draw(data);
        prev.disabled = turnOffset === 0;
        next.disabled = !data.more;
        status.textContent = "Agent " + data.agent_id + ", session " + data.session_id + ": turns " + (data.offset + 1) + "–" + (data.offset + data.turns.length) + (data.more ? " (more follow)" : "");
      }).catch(fail);
    }

    function draw(data) {
      var turns = data.turns;
      var labels = turns.map(function (t) { return "turn " + t.turn_index; });
      function bar(name, colour, start, length, text) {
        return {
          type: "bar", orientation: "h", name: name, y: labels,
          base: turns.map(start), x: turns.map(length),
          marker: { color: colour }, hovertext: turns.map(text), hoverinfo: "text+name",
        };
      }
      var traces = [
        bar("waiting (send → first token)", "#E69F00", function (t) { return t.send_s; },
          function (t) { return t.ttft_s === null ? (t.end_s === null ? 0 : t.end_s - t.send_s) : t.ttft_s; },
          function (t) { return "TTFT " + fmt(t.ttft_s, 3) + " s · input " + fmt(t.n_in, 0) + " (cached " + fmt(t.n_cached, 0) + ")" + (t.ok ? "" : " · FAILED " + (t.error_class || "")); }),
        bar("streaming (first → last token)", "#0072B2", function (t) { return t.first_token_s; },
          function (t) { return t.first_token_s === null || t.last_token_s === null ? null : t.last_token_s - t.first_token_s; },
          function (t) { return "output " + fmt(t.n_out, 0) + " tokens · " + fmt(t.output_speed, 1) + " tok/s"; }),
        bar("tool delay (end → next send)", "#BBBBBB", function (t) { return t.end_s; },
          function (t) { return t.tool_delay_s; },
          function (t) { return "tool delay " + fmt(t.tool_delay_s, 2) + " s"; }),
      ];
      var shapes = [];
      [data.window_start_s, data.window_end_s].forEach(function (x) {
        if (x !== null && x !== undefined) {
          shapes.push({ type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1, line: { color: "#777", dash: "dash", width: 1 } });
        }
      });
      var layout = {
        barmode: "overlay", height: Math.max(220, 28 * turns.length + 120), hovermode: "closest",
        xaxis: { title: { text: "seconds from the start of the measurement window (dashed: window)" }, zeroline: false },
        yaxis: { autorange: "reversed", type: "category" },
        legend: { orientation: "h", y: -0.25 }, margin: { l: 70, r: 20, t: 20, b: 80 }, shapes: shapes,
      };
      if (window.Plotly) { window.Plotly.react(plot, traces, layout, config); }
      body.innerHTML = "";
      turns.forEach(function (t) {
        var tr = document.createElement("tr");
        if (!t.ok) { tr.className = "failed"; }
        [t.turn_index, fmt(t.send_s, 3), fmt(t.ttft_s, 3), fmt(t.last_token_s, 3), fmt(t.tool_delay_s, 2), fmt(t.n_in, 0), fmt(t.n_cached, 0), fmt(t.n_out, 0), fmt(t.output_speed, 1), t.ok ? "ok" : "failed: " + (t.error_class || "error")].forEach(function (v, i) {
          var td = document.createElement(i === 0 ? "th" : "td");
          if (i === 0) { td.scope = "row"; }
          if (i < 9) { td.className = "num"; }
          td.textContent = v;
          tr.appendChild(td);
        });
        body.appendChild(tr);
      });
    }

    trialSel.addEventListener("change", function () { loadSessions(false); });
    sessSel.addEventListener("change", function () { generation += 1; turnOffset = 0; loadTurns(); });
    moreSessions.addEventListener("click", function () { loadSessions(true); });
    prev.addEventListener("click", function () { generation += 1; turnOffset = Math.max(0, turnOffset - PAGE); loadTurns(); });
    next.addEventListener("click", function () { generation += 1; turnOffset += PAGE; loadTurns(); });
    if (!trialSel.value) {
      var first = Array.prototype.find.call(trialSel.options, function (o) { return !o.disabled; });
      if (first) { trialSel.value = first.value; }
    }
    if (trialSel.value && !trialSel.selectedOptions[0].disabled) { loadSessions(false); }
  }

  document.querySelectorAll("[data-timeline]").forEach(init);
})();
