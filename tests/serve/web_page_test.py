"""Drives rn50 serve's web page in a real browser (Debian's chromium, headless, through
chromedriver and python3-selenium): picks an image with the page's file input, waits for the
top-5 table and the latency line, and for the live metrics to count the request.
    web_page_test.py URL IMAGE_FILE  -> prints one JSON object: rows, latency, stats
"""
import json
import sys

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

url, image = sys.argv[1], sys.argv[2]
opts = Options()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-quic", "--no-first-run"):
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
try:
    driver.get(url)
    WebDriverWait(driver, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
    driver.find_element(By.ID, "file").send_keys(image)
    WebDriverWait(driver, 60).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#predictions tr.prediction")) == 5)
    rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#predictions tr.prediction")]
    latency = driver.find_element(By.ID, "latency").text
    WebDriverWait(driver, 30).until(lambda d: " ok, " in d.find_element(By.ID, "stats").text)
    stats = driver.find_element(By.ID, "stats").text
    print(json.dumps({"rows": rows, "latency": latency, "stats": stats,
                      "error": driver.find_element(By.ID, "error").text}))
finally:
    driver.quit()
