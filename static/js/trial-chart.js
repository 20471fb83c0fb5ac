// The review console's trial chart: the figure is the page's JSON data block (no inline
// script, docs/security.md "Headers").
(function () {
  var data = document.getElementById("trial-chart-data");
  if (!data) return;
  var fig = JSON.parse(data.textContent);
  Plotly.newPlot("trial-chart", fig.data, fig.layout, {responsive: true, displaylogo: false});
})();
