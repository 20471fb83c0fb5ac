// Draws every server-built Plotly figure on the page and wires the axis-scale buttons.
// plotly.js is served from /static/vendor; nothing is fetched from anywhere else.
(function () {
  "use strict";
  var config = { responsive: true, displaylogo: false, showLink: false, showSendToCloud: false, showEditInChartStudio: false };

  function draw(el) {
    var source = document.getElementById(el.dataset.figure);
    if (!source || !window.Plotly) { return; }
    var fig = JSON.parse(source.textContent);
    window.Plotly.newPlot(el, fig.data, fig.layout, config);
  }

  function setScale(button) {
    var el = document.getElementById(button.dataset.scaleFor);
    var type = button.dataset.scale;
    window.Plotly.relayout(el, { "xaxis.type": type, "yaxis.type": type });
    document.querySelectorAll('[data-scale-for="' + button.dataset.scaleFor + '"]').forEach(function (b) {
      b.setAttribute("aria-pressed", b === button ? "true" : "false");
    });
    // keep the choice in the address so the link shares it
    var url = new URL(window.location.href);
    if (type === "log") { url.searchParams.set("scale", "log"); } else { url.searchParams.delete("scale"); }
    window.history.replaceState(null, "", url);
  }

  // A chart inside a closed section has no width yet: it is drawn when the section opens.
  function drawWhenShown(el) {
    var closed = el.closest("details:not([open])");
    if (!closed) { draw(el); return; }
    closed.addEventListener("toggle", function once() {
      if (!closed.open) { return; }
      closed.removeEventListener("toggle", once);
      drawWhenShown(el);
    });
  }

  // A link to an anchor inside a closed section opens the sections around it.
  function openTarget() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    var el = id && document.getElementById(id);
    for (var d = el && el.closest("details"); d; d = d.parentElement.closest("details")) {
      d.open = true;
    }
    if (el) { el.scrollIntoView(); }
  }

  // Any chart already drawn inside a section (the session timeline's) takes the width the
  // section has once it opens.
  document.querySelectorAll("details").forEach(function (d) {
    d.addEventListener("toggle", function () {
      if (!d.open || !window.Plotly) { return; }
      d.querySelectorAll(".js-plotly-plot").forEach(function (p) { window.Plotly.Plots.resize(p); });
    });
  });

  document.querySelectorAll("[data-figure]").forEach(drawWhenShown);
  if (window.location.hash) { openTarget(); }
  window.addEventListener("hashchange", openTarget);
  document.querySelectorAll("[data-scale-for]").forEach(function (button) {
    button.addEventListener("click", function () { setScale(button); });
  });
})();
