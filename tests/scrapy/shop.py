"""A spider whose revisits recrawl plans: ``scrapy runspider shop.py``.

Beside it: ``recrawl.toml`` (the budget and the product fields) and the store
``recrawl.db`` holding the URLs to watch (``recrawl urls add``).
"""

from recrawl.scrapy import RecrawlSpider

SETTINGS = {  # or in a project's settings.py
    "ADDONS": {"recrawl.scrapy.RecrawlAddon": 500},
    "RECRAWL_DB": "recrawl.db",
    "RECRAWL_CONFIG": "recrawl.toml",
    "RECRAWL_RUN_FOR": "20d",  # crawl time; without it, until stopped
}


class ShopSpider(RecrawlSpider):
    name = "shop"
    custom_settings = SETTINGS
    page_type = "product"  # what start_urls are registered as
    start_urls = ()  # URLs to add to the store (or `recrawl urls add`)

    def parse(self, response):
        # the item is the page's record: a change in these fields is a change
        yield {
            "name": response.css("h1.name::text").get(),
            "price": response.css(".price::text").get(),
            "stock": response.css(".stock::text").get(),
        }

    def parse_not_modified(self, response):
        # a 304: unchanged since the last fetch, nothing to parse; the record
        # that fetch gave (None when this add-on did not keep it)
        record = response.meta["recrawl_record"]
        if record is not None:
            yield dict(record)
