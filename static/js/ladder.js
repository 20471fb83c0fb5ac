// A ladder's waterfall and frontier charts, one per JSON data block (id "<chart>-data").
document.querySelectorAll('script[type="application/json"][id$="-data"]').forEach(function (el) {
  var fig = JSON.parse(el.textContent);
  Plotly.newPlot(el.id.slice(0, -5), fig.data, fig.layout, {displaylogo: false, responsive: true});
});
