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

  document.querySelectorAll("[data-figure]").forEach(draw);
  document.querySelectorAll("[data-scale-for]").forEach(function (button) {
    button.addEventListener("click", function () { setScale(button); });
  });
})();
