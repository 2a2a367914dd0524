// capplan's only script: <x-chart> renders an ECharts option given as JSON in a child
// <script type="application/json">. It manages its own lifecycle, so it works with any htmx swap.
class XChart extends HTMLElement {
  connectedCallback() {
    if (!window.echarts) { return; }
    const src = this.querySelector('script[type="application/json"]');
    if (!src) { return; }
    const option = JSON.parse(src.textContent);
    this.chart = window.echarts.init(this, null, { renderer: 'svg' });
    this.chart.setOption(option);
    this.observer = new ResizeObserver(() => this.chart && this.chart.resize());
    this.observer.observe(this);
    this.dataset.ready = 'true';
  }
  disconnectedCallback() {
    if (this.observer) { this.observer.disconnect(); }
    if (this.chart) { this.chart.dispose(); this.chart = null; }
  }
}
window.addEventListener('DOMContentLoaded', () => {
  if (!customElements.get('x-chart')) { customElements.define('x-chart', XChart); }
});
